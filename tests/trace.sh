#!/bin/bash
# trace.sh - lean8-trace end to end on traces with known content written by
# trace-gen through the recorder API (make test runs it):
#   1. summary prints every number of the known trace; one line per rank
#      for several files, %r naming;
#   2. a truncated file is read up to its last whole record with a warning
#      (exit 0); a file with nothing readable exits 1;
#   3. export --chrome is JSON with what Perfetto needs (ph, ts, pid, name,
#      args), counter tracks per tag and for reserved, OOM and step instants;
#   4. plot writes a small SVG that headless Chromium renders with the
#      series' colours on screen (PNG decoded here, no PIL);
#   5. live follows a running writer and stops at its end marker, or when
#      the writer process dies without one;
#   6. a trace file whose writer is still running is never truncated.
# Usage: tests/trace.sh BUILD_DIR
set -u
build=$1
lt=$build/bin/lean8-trace
gen=$build/tests/trace-gen
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "  ok    $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL  $1"; }
has() { grep -qF -- "$2" "$1"; }

# ---- 1. summary of the known trace (numbers in tests/trace_known.h) ----
"$gen" known "$tmp/known.l8trace" >/dev/null || bad "trace-gen known failed"
"$lt" summary "$tmp/known.l8trace" > "$tmp/sum.txt" 2> "$tmp/sum.err"
rc=$?
missing=""
for want in "events           17 " "allocated peak   3.50 MiB (3670016 B)" \
            "reserved peak    6.00 MiB (6291456 B)" "fragmentation    1.714" \
            "now              allocated 2.50 MiB, reserved 4.00 MiB" "pinned peak      64.00 KiB (65536 B)" \
            "out 512.00 KiB (524288 B, 1 copies), in 512.00 KiB (524288 B, 1 copies)" \
            "steps            2 (last 2)" "OOM events       1" \
            "8.00 MiB (8388608 B) requested, 6.00 MiB reserved, tag layer1.fc1" \
            "format 2, rank 0, pid" ", ended"; do
    has "$tmp/sum.txt" "$want" || missing="$missing [$want]"
done
top=$(sed -n '/top tags at the allocated peak/,$p' "$tmp/sum.txt" | awk 'NR>1{print $1, $4}' | tr '\n' ' ')
if [ $rc = 0 ] && [ -z "$missing" ] && [ "$top" = "layer0.fc1 2097152 embed 1048576 layer1.fc1 524288 " ]; then
    ok "summary: every number of the known trace"
else bad "summary (rc $rc) lacks:$missing; top tags '$top'"; cat "$tmp/sum.txt" "$tmp/sum.err"; fi
has "$tmp/sum.err" "1 frees of blocks the file never allocated" && ok "summary warns about the unmatched free" \
    || bad "no warning about the unmatched free"

RANK=1 "$gen" known "$tmp/job.%r.l8trace" >/dev/null && RANK=0 "$gen" spread "$tmp/job.%r.l8trace" >/dev/null
"$lt" summary "$tmp/job.1.l8trace" "$tmp/job.0.l8trace" > "$tmp/ranks.txt" 2>/dev/null
if [ -f "$tmp/job.0.l8trace" ] && [ -f "$tmp/job.1.l8trace" ] && [ "$(wc -l < "$tmp/ranks.txt")" = 3 ] &&
   awk 'NR==2 && $1=="0" && $4=="135" && $5=="50.00" {a=1} NR==3 && $1=="1" && $4=="17" && $5=="3.50" && $9=="1.714" {b=1} END{exit !(a&&b)}' "$tmp/ranks.txt"; then
    ok "summary of two ranks: one line each, sorted by rank (%r names)"
else bad "per-rank summary"; cat "$tmp/ranks.txt"; ls "$tmp"; fi

# ---- 2. truncated and unreadable files ----
size=$(stat -c %s "$tmp/known.l8trace")
head -c $((size - 48 - 20)) "$tmp/known.l8trace" > "$tmp/cut.l8trace"   # end marker + 20 bytes
"$lt" summary "$tmp/cut.l8trace" > "$tmp/cut.txt" 2> "$tmp/cut.err"
rc=$?
if [ $rc = 0 ] && has "$tmp/cut.err" "ends with 28 bytes of an incomplete record" && has "$tmp/cut.txt" "events           16 " \
   && has "$tmp/cut.txt" "writer gone (no end marker)"; then ok "truncated file: 16 whole events, warning, exit 0"
else bad "truncated file (rc $rc)"; cat "$tmp/cut.txt" "$tmp/cut.err"; fi
{ head -c 48 "$tmp/known.l8trace"; head -c 48 /dev/urandom | tr '\000' '\377'; } > "$tmp/junk.l8trace"
"$lt" summary "$tmp/junk.l8trace" > /dev/null 2> "$tmp/junk.err"
rc=$?
[ $rc = 1 ] && has "$tmp/junk.err" "no event could be read" && ok "nothing readable: exit 1 with the reason" \
    || { bad "unreadable file (rc $rc)"; cat "$tmp/junk.err"; }
echo "not a trace" > "$tmp/text.l8trace"
"$lt" summary "$tmp/text.l8trace" > /dev/null 2> "$tmp/text.err"
[ $? = 1 ] && has "$tmp/text.err" "bad magic" && ok "not a trace: exit 1, bad magic" || bad "not a trace"

# ---- 3. Chrome trace-event JSON ----
"$gen" spread "$tmp/spread.l8trace" >/dev/null
if "$lt" export --chrome "$tmp/spread.l8trace" "$tmp/known.l8trace" -o "$tmp/out.json" 2>/dev/null &&
   python3 - "$tmp/out.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
assert isinstance(ev, list) and len(ev) > 100, len(ev)
for e in ev:
    for k in ("ph", "ts", "pid", "name", "args"):
        assert k in e, (k, e)
    assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
counters = {(e["pid"], e["name"]) for e in ev if e["ph"] == "C"}
names0 = {n for p, n in counters}
assert {"activations", "weights", "grads", "reserved", "embed", "layer0.fc1"} <= names0, names0
assert all(isinstance(e["args"]["bytes"], int) for e in ev if e["ph"] == "C")
inst = [e for e in ev if e["ph"] == "i"]
assert sum(e["name"] == "OOM" for e in inst) == 2, inst
assert sum(e["name"].startswith("step ") for e in inst) == 6, inst
assert {e["pid"] for e in ev} == {0}, "both files are rank 0: one pid"
acts = [e["args"]["bytes"] for e in ev if e["ph"] == "C" and e["name"] == "activations"]
assert max(acts) == 32 << 20 and acts[-1] == 0, (max(acts), acts[-1])
EOF
then ok "export --chrome: valid JSON, counters per tag and reserved, OOM and step instants"
else bad "export --chrome"; fi

# ---- 4. SVG plot, rendered by headless Chromium ----
"$lt" plot "$tmp/spread.l8trace" -o "$tmp/plot.svg" 2>/dev/null
svg_bytes=$(stat -c %s "$tmp/plot.svg" 2>/dev/null || echo 0)
if python3 -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$tmp/plot.svg" 2>/dev/null && [ "$svg_bytes" -lt 300000 ]; then
    ok "plot: well-formed SVG, $svg_bytes bytes"
else bad "plot: SVG not well-formed or too big ($svg_bytes bytes)"; fi
chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chrome" ]; then
    echo "  SKIP  SVG render check: chromium is not installed and could not be (apt-get install chromium)"
else
    timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,640 \
        --screenshot="$tmp/plot.png" "file://$tmp/plot.svg" > "$tmp/chrome.log" 2>&1
    if python3 - "$tmp/plot.png" <<'EOF'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, w = 8, b"", 0
while pos < len(data):
    n, typ = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if typ == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and ctype in (2, 6), (depth, ctype)
        bpp = 3 if ctype == 2 else 4
    elif typ == b"IDAT":
        idat += body
    pos += 12 + n
raw, stride = zlib.decompress(idat), w * bpp
prev, counts = bytearray(stride), {}
want = {(0x1f, 0x77, 0xb4): "activations", (0xff, 0x7f, 0x0e): "weights", (0x2c, 0xa0, 0x2c): "grads",
        (0, 0, 0): "reserved", (0xff, 0, 0): "OOM"}
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):                       # undo the PNG filters
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, w):
        px = tuple(line[x * bpp:x * bpp + 3])
        if px in want: counts[px] = counts.get(px, 0) + 1
    prev = line
need = {"activations": 5000, "weights": 5000, "grads": 2000, "reserved": 500, "OOM": 20}
short = {want[k]: counts.get(k, 0) for k in want if counts.get(k, 0) < need[want[k]]}
assert not short, "too few pixels of %s (of %s)" % (short, {want[k]: v for k, v in counts.items()})
print("  pixels:", {want[k]: v for k, v in counts.items()})
EOF
    then ok "plot renders in headless Chromium with every series' colour on screen"
    else bad "plot render check"; tail -5 "$tmp/chrome.log"; fi
fi

# ---- 5. live ----
"$gen" slow "$tmp/slow.l8trace" 1.0 > /dev/null &
pids+=($!)
sleep 0.2
timeout 30 "$lt" live "$tmp/slow.l8trace" --interval 0.2 > "$tmp/live.txt" 2>&1
rc=$?
lines=$(wc -l < "$tmp/live.txt")
if [ $rc = 0 ] && tail -1 "$tmp/live.txt" | grep -q "job ended (end marker)" && tail -1 "$tmp/live.txt" | grep -q "events 50 " \
   && [ "$lines" -ge 3 ]; then ok "live: $lines periodic lines, stops at the end marker with all 50 events"
else bad "live on a finishing writer (rc $rc)"; cat "$tmp/live.txt"; fi

"$gen" hang "$tmp/hang.l8trace" > /dev/null &
hang=$!
pids+=($hang)
sleep 0.3
timeout 30 "$lt" live "$tmp/hang.l8trace" --interval 0.1 > "$tmp/live2.txt" 2>&1 &
live=$!
sleep 0.5
{ kill -9 $hang; wait $hang; } 2>/dev/null
wait $live
rc=$?
if [ $rc = 0 ] && tail -1 "$tmp/live2.txt" | grep -q "writer process gone" && tail -1 "$tmp/live2.txt" | grep -q "steps 1 " \
   && tail -1 "$tmp/live2.txt" | grep -q "before.hang 4.00 KiB"; then
    ok "live: a hung writer's events are shown; stops when the writer is killed"
else bad "live on a killed writer (rc $rc)"; cat "$tmp/live2.txt"; fi

# ---- 6. never truncate a running writer's file ----
coproc HOLD { exec "$gen" hold "$tmp/held.l8trace"; }
pids+=($HOLD_PID)
read -r -t 10 _ <&"${HOLD[0]}"; read -r -t 10 ready <&"${HOLD[0]}"
before=$(stat -c %i:%s "$tmp/held.l8trace")
"$gen" known "$tmp/held.l8trace" > /dev/null 2> "$tmp/held.err"
rc=$?
if [ "$ready" = ready ] && [ $rc = 1 ] && has "$tmp/held.err" "belongs to process $HOLD_PID, which is still running" \
   && [ "$(stat -c %i:%s "$tmp/held.l8trace")" = "$before" ]; then ok "a running writer's file is refused and left as it was"
else bad "refusal (rc $rc, ready '$ready')"; cat "$tmp/held.err"; fi
kill -9 $HOLD_PID; wait $HOLD_PID 2>/dev/null
"$gen" known "$tmp/held.l8trace" > /dev/null 2>&1 && ok "once its writer is gone the path is reused" || bad "reuse after the writer died"

# every flag --help names is documented in docs/trace.md
undoc=$("$(dirname "$0")/doc_flags.sh" "$lt" "$(dirname "$0")/../docs/trace.md") && [ -z "$undoc" ] \
    && ok "docs/trace.md documents every flag of lean8-trace --help" \
    || bad "lean8-trace flags missing from docs/trace.md: ${undoc:-(--help names no flag)}"

echo "  trace.sh: $pass passed, $fail failed"
[ $fail = 0 ]
