#!/usr/bin/env python3
"""ktrace.py - the steady-state timeline of a CUDA graph step, from the trace
libl8ktrace.so writes (tools/ktrace.c):

    python3 tools/ktrace.py TRACE.csv [--graph ID | --all]

Takes the graph launched most often (or --graph ID; --all: every graph of the
file in the order of their ids, which is the order the program instantiated
them in, each timeline after a blank line), splits its records into
launches (one correlation id per cuGraphLaunch), keeps the middle third of
them (steady state: past the warm-up, before the end), and prints per graph
node the median start and end in microseconds from the launch's first start,
its duration, its stream (s0, s1, ... in the order of the driver's stream
ids) and its name, ordered by start; above them the median span of a launch
(first start to last end) and the median period (start to next start).
Exit 1 with a message for a file that is missing, malformed, or holds no
graph launch."""
import collections
import statistics
import sys

NAME_COLUMNS = 70


def fail(msg):
    print("ktrace.py: " + msg, file=sys.stderr)
    sys.exit(1)


def read(path):
    rows = []
    try:
        f = open(path)
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    with f:
        for n, line in enumerate(f, 1):
            p = line.rstrip("\n").split(",", 7)
            if len(p) != 8 or p[0] not in ("K", "S", "C"):
                fail("%s:%d: not a libl8ktrace line (kind,stream,start_ns,end_ns,graph_id,"
                     "graph_node,correlation,name)" % (path, n))
            try:
                stream, start, end, gid, node, corr = (int(x) for x in p[1:7])
            except ValueError:
                fail("%s:%d: a number field is not an integer" % (path, n))
            rows.append((stream, start, end, gid, node, corr, p[7]))
    return rows


def timeline(rows, gid):
    launches = collections.defaultdict(list)
    for r in rows:
        if r[3] == gid:
            launches[r[5]].append(r)
    order = sorted(launches, key=lambda c: min(x[1] for x in launches[c]))
    steady = order[len(order) // 3: max(2 * len(order) // 3, len(order) // 3 + 1)]
    t0 = [min(x[1] for x in launches[c]) for c in steady]
    spans = [(max(x[2] for x in launches[c]) - t) / 1e3 for c, t in zip(steady, t0)]
    nodes = {}
    for c, t in zip(steady, t0):
        for stream, start, end, _, node, _, name in launches[c]:
            d = nodes.setdefault(node, ([], [], stream, name))
            d[0].append((start - t) / 1e3)
            d[1].append((end - t) / 1e3)
    periods = [(b - a) / 1e3 for a, b in zip(t0, t0[1:])]
    streams = sorted({d[2] for d in nodes.values()})
    print("graph %d: %d launches, %d in steady state; span %.2f us, period %s, %d nodes"
          % (gid, len(order), len(steady), statistics.median(spans),
             "%.2f us" % statistics.median(periods) if periods else "- (one launch)", len(nodes)))
    print("  %8s %8s %7s  %-6s %s" % ("start", "end", "us", "stream", "name"))
    for node, (starts, ends, stream, name) in sorted(
            nodes.items(), key=lambda kv: (statistics.median(kv[1][0]), kv[0])):
        s, e = statistics.median(starts), statistics.median(ends)
        print("  %8.2f %8.2f %7.2f  s%-5d %s" % (s, e, e - s, streams.index(stream), name[:NAME_COLUMNS]))


def main(argv):
    if not (len(argv) == 2 or (len(argv) == 3 and argv[2] == "--all") or
            (len(argv) == 4 and argv[2] == "--graph")):
        fail("usage: ktrace.py TRACE.csv [--graph ID | --all]")
    rows = read(argv[1])
    graphs = collections.Counter()
    for r in rows:
        if r[3]:
            graphs[r[3]] += 1
    if not graphs:
        fail("%s: %d records, none from a CUDA graph launch" % (argv[1], len(rows)))
    if len(argv) == 3:
        for n, gid in enumerate(sorted(graphs)):
            if n:
                print()
            timeline(rows, gid)
        return 0
    if len(argv) == 4:
        try:
            gid = int(argv[3])
        except ValueError:
            fail("--graph wants a graph id (a number), not '%s'" % argv[3])
        if gid not in graphs:
            fail("%s: no graph %d (graphs: %s)" % (argv[1], gid, ", ".join(map(str, sorted(graphs)))))
    else:
        gid = max(graphs, key=lambda g: (graphs[g], -g))
    timeline(rows, gid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
