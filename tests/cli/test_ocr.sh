#!/usr/bin/env bash
# qvl ocr on the tiny model: greedy tokens equal the reference's for the golden
# image cases, one JSONL record per file (bad files get error records and exit
# 3), identical files computed once, --resume/--force/refusal, paths on stdin,
# and a SIGKILLed or interrupted run that --resume completes.
source "$(dirname "$0")/common.sh" "$@"
ocr() { "$QVL" ocr --model "$MODEL" --dtype f32 "$@"; }
lines() { wc -l < "$1"; }
# python3 -c snippets below get the JSONL file as sys.argv[1].
records='[json.loads(l) for l in open(sys.argv[1])]'

# --- The golden cases whose conversation is one (system +) image + prompt turn.
# photo.jpg first: the session must forget it before small.png.
python3 - "$DATA/goldens.json" "$TMP" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
for case in ("one_image", "system_image"):
    json.dump(g["model_cases"][case]["greedy_16"], open(f"{sys.argv[2]}/{case}.expected", "w"))
PY
ocr -n 16 --prompt "What is in the image?" "$DATA/images/photo.jpg" "$DATA/images/small.png" \
  > "$TMP/one_image.jsonl" 2> "$TMP/one_image.err"
check "one_image prompt exits 0" "[ $? -eq 0 ] || { cat '$TMP/one_image.err'; false; }"
check "small.png after photo.jpg gives the one_image reference tokens" \
  "python3 -c 'import json,sys; r=$records; sys.exit(0 if r[1][\"tokens\"]==json.load(open(\"$TMP/one_image.expected\")) else 1)' '$TMP/one_image.jsonl'"
ocr -n 16 --system "You are a precise OCR engine. Output only the text." --prompt "Read all text." \
  "$DATA/images/photo.jpg" > "$TMP/system_image.jsonl" 2>/dev/null
check "--system + --prompt give the system_image reference tokens" \
  "python3 -c 'import json,sys; r=$records; sys.exit(0 if r[0][\"tokens\"]==json.load(open(\"$TMP/system_image.expected\")) else 1)' '$TMP/system_image.jsonl'"

# --- A folder with two images, a truncated JPEG, a text file named .png and a
# file the scan must ignore.
IN="$TMP/in"
mkdir -p "$IN"
cp "$DATA/images/small.png" "$DATA/images/photo.jpg" "$IN/"
head -c 5000 "$DATA/images/photo.jpg" > "$IN/cut.jpg"
printf 'hello' > "$IN/notes.png"
printf 'not scanned' > "$IN/readme.txt"
OUT="$TMP/out.jsonl"
ocr -n 4 --output "$OUT" "$IN" > "$TMP/folder.stdout" 2> "$TMP/folder.err"
rc=$?
check "a folder with two bad files exits 3" "[ $rc -eq 3 ] || { cat '$TMP/folder.err'; false; }"
check "... nothing on stdout with --output" "[ ! -s '$TMP/folder.stdout' ]"
python3 - "$OUT" "$IN" <<'PY' || fail=1
import hashlib, json, sys
out, folder = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(out)]
files = [r["file"] for r in recs]
want = [f"{folder}/{n}" for n in ("cut.jpg", "notes.png", "photo.jpg", "small.png")]
assert files == want, f"files {files} != {want} (sorted byte-wise, readme.txt skipped)"
by = {r["file"].rsplit("/", 1)[1]: r for r in recs}
for name, r in by.items():
    sha = hashlib.sha256(open(f"{folder}/{name}", "rb").read()).hexdigest()
    assert r["sha256"] == sha, f"{name}: sha256 {r['sha256']} != {sha}"
assert "truncated" in by["cut.jpg"]["error"] and "cut.jpg" in by["cut.jpg"]["error"], by["cut.jpg"]
assert "not a PNG or JPEG" in by["notes.png"]["error"] and "notes.png" in by["notes.png"]["error"], by["notes.png"]
for name, (w, h) in {"photo.jpg": (320, 240), "small.png": (96, 64)}.items():
    r = by[name]
    assert "error" not in r, r
    assert (r["width"], r["height"]) == (w, h), f"{name}: {r['width']}x{r['height']}"
    assert 1 <= len(r["tokens"]) <= 4 and isinstance(r["text"], str) and r["ms"] >= 0, r
print("ok: one record per file: errors name the file, sha256/width/height right")
PY
check "... summary on stderr counts them" "grep -q 'done 2, failed 2, skipped 0' '$TMP/folder.err'"

# --- Resume adds nothing twice; an existing output is refused, then forced.
cp "$OUT" "$TMP/first.jsonl"
ocr -n 4 --output "$OUT" --resume "$IN" 2> "$TMP/resume.err"
rc=$?
check "--resume over a finished output exits 0" "[ $rc -eq 0 ] || { cat '$TMP/resume.err'; false; }"
check "... and adds nothing" "cmp -s '$OUT' '$TMP/first.jsonl'"
check "... skipping all four" "grep -q 'skipped 4' '$TMP/resume.err'"

ocr -n 4 --output "$OUT" "$IN" > /dev/null 2> "$TMP/refuse.err"
rc=$?
check "a non-empty output is refused with exit 1" "[ $rc -eq 1 ]"
check "... in one line saying what to do" \
  "[ \$(wc -l < '$TMP/refuse.err') -eq 1 ] && grep -q -- '--resume' '$TMP/refuse.err' && grep -q -- '--force' '$TMP/refuse.err'"
check "... leaving it untouched" "cmp -s '$OUT' '$TMP/first.jsonl'"
ocr -n 4 --output "$OUT" --force "$IN" 2>/dev/null
check "--force rewrites it (4 records, not 8)" "[ \$(lines '$OUT') -eq 4 ]"

# --- No flag makes qvl write over one of its inputs: the output named as an
# input, a link to one (symbolic or hard), or stdout appending to one.
OP="$TMP/op"
mkdir -p "$OP"
cp "$DATA/images/small.png" "$OP/a.png" && cp "$DATA/images/small.png" "$OP/b.png"
ln -s "$OP/b.png" "$TMP/symlink.jsonl" && ln "$OP/b.png" "$TMP/hardlink.jsonl"
refuses_to_write_over_b() {  # DESCRIPTION: after a run whose output was $TMP/over.out / over.err
  check "$1: exit 1, one line naming the input" \
    "[ $rc -eq 1 ] && [ \$(wc -l < '$TMP/over.err') -eq 1 ] && grep -q 'is the same file as the input $OP/b.png' '$TMP/over.err' || dump '$TMP/over.err'"
  check "$1: the image is untouched" "cmp -s '$OP/b.png' '$DATA/images/small.png'"
}
ocr -n 2 --force -o "$OP/b.png" "$OP" > "$TMP/over.out" 2> "$TMP/over.err"; rc=$?
refuses_to_write_over_b "--force --output an input found in the folder"
ocr -n 2 --force -o "$TMP/symlink.jsonl" "$OP" > "$TMP/over.out" 2> "$TMP/over.err"; rc=$?
refuses_to_write_over_b "--force --output a symbolic link to an input"
ocr -n 2 --force -o "$TMP/hardlink.jsonl" "$OP/b.png" > "$TMP/over.out" 2> "$TMP/over.err"; rc=$?
refuses_to_write_over_b "--force --output a hard link to an input"
ocr -n 2 "$OP/a.png" "$OP/b.png" >> "$OP/b.png" 2> "$TMP/over.err"; rc=$?
refuses_to_write_over_b "stdout appending to an input"
ocr --force -o "$OP/b.png" --merge "$TMP/first.jsonl" -- "$OP" > "$TMP/over.out" 2> "$TMP/over.err"; rc=$?
refuses_to_write_over_b "--merge --force --output an input"

# --- File names that are not UTF-8: two names differing only in an invalid
# byte keep their own records, exact in file_b64, and --resume matches them.
NU="$TMP/nonutf8"
mkdir -p "$NU"
cp "$DATA/images/small.png" "$NU/a"$'\xe9'"b.png"
{ cat "$DATA/images/small.png"; printf 'x'; } > "$NU/a"$'\xff'"b.png"
cp "$DATA/images/small.png" "$NU/c.png"
ocr -n 2 -o "$TMP/nu.jsonl" "$NU" 2> "$TMP/nu.err"
check "a folder with names that are not UTF-8 exits 0" "[ $? -eq 0 ] || dump '$TMP/nu.err'"
check "... each file's exact name is in its record" "python3 - '$TMP/nu.jsonl' '$NU' <<'PY' || dump '$TMP/nu.jsonl'
import base64, json, os, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
names = [base64.b64decode(r['file_b64']) if 'file_b64' in r else r['file'].encode() for r in recs]
want = sorted(os.path.join(os.fsencode(sys.argv[2]), n) for n in os.listdir(os.fsencode(sys.argv[2])))
assert names == want, (names, want)
assert recs[0]['file'] == sys.argv[2] + '/a\ufffdb.png' and 'file_b64' not in recs[2], recs
assert base64.b64decode(recs[2]['duplicate_of_b64']) == want[0], recs[2]
PY"
ocr -n 2 -o "$TMP/nu.jsonl" --resume "$NU" 2> "$TMP/nu-resume.err"
check "... and --resume finds all three done" \
  "[ \$(lines '$TMP/nu.jsonl') -eq 3 ] && grep -q 'skipped 3' '$TMP/nu-resume.err' || dump '$TMP/nu-resume.err' '$TMP/nu.jsonl'"

mkdir -p "$TMP/broken" && cp "$MODEL"/*.json "$TMP/broken/" && cp "$MODEL"/model-0000*.safetensors "$TMP/broken/"
truncate -s 1000000 "$TMP/broken/model-00001-of-00002.safetensors"
"$QVL" ocr --model "$TMP/broken" --output "$TMP/no-such-dir/out.jsonl" "$IN" 2> "$TMP/unwritable.err"
rc=$?
check "an unwritable output exits 1, checked before the (broken) model loads" \
  "[ $rc -eq 1 ] && grep -q 'no-such-dir/out.jsonl' '$TMP/unwritable.err'"
QVL_MODEL= "$QVL" ocr --model "$TMP/no-such-model" "$IN" > /dev/null 2> "$TMP/nomodel.err"
check "a missing model exits 1 with download instructions" \
  "[ $? -eq 1 ] && grep -q 'huggingface-cli download' '$TMP/nomodel.err'"
QVL_MODEL="$DATA/images/small.png" "$QVL" ocr "$IN" > /dev/null 2> "$TMP/filemodel.err"
check "a model 'folder' that is a file exits 1 saying it is not a folder" \
  "[ $? -eq 1 ] && grep -q 'small.png.* is not a folder' '$TMP/filemodel.err' && ! grep -q 'not found' '$TMP/filemodel.err' || dump '$TMP/filemodel.err'"
ocr --resume "$IN" > /dev/null 2>&1
check "--resume without --output is a usage error (2)" "[ $? -eq 2 ]"
ocr --resume --force --output "$OUT" "$IN" > /dev/null 2>&1
check "--resume with --force is a usage error (2)" "[ $? -eq 2 ]"

# --- Identical files are computed once.
DUP="$TMP/dup"
mkdir -p "$DUP"
cp "$DATA/images/small.png" "$DUP/a.png" && cp "$DATA/images/small.png" "$DUP/b.png"
cp "$DATA/images/photo.jpg" "$DUP/c.jpg" && cp "$DATA/images/photo.jpg" "$DUP/d.JPG"
ocr -n 4 -v "$DUP" > "$TMP/dup.jsonl" 2> "$TMP/dup.err"
check "two pairs of identical files exit 0" "[ $? -eq 0 ]"
check "... computed 2, reused 2" "grep -q 'computed 2, reused 2' '$TMP/dup.err' || { cat '$TMP/dup.err'; false; }"
check "... each copy has its own record with the original's text and tokens" \
  "python3 -c 'import json,sys; r=$records; sys.exit(0 if [x[\"file\"][-5:] for x in r]==[\"a.png\",\"b.png\",\"c.jpg\",\"d.JPG\"] and all(r[i][k]==r[i+1][k] for i in (0,2) for k in (\"text\",\"tokens\",\"sha256\",\"width\")) else 1)' '$TMP/dup.jsonl'"

# --- Paths on stdin, in the order given; a folder on stdin is scanned.
printf '%s\n' "$IN/small.png" "" "$DUP" "$IN/photo.jpg" | ocr -n 4 - > "$TMP/stdin.jsonl" 2>/dev/null
check "'-' reads paths from stdin in order" \
  "python3 -c 'import json,sys; r=$records; sys.exit(0 if [x[\"file\"] for x in r]==[\"$IN/small.png\",\"$DUP/a.png\",\"$DUP/b.png\",\"$DUP/c.jpg\",\"$DUP/d.JPG\",\"$IN/photo.jpg\"] else 1)' '$TMP/stdin.jsonl'"

# An image piped to '-' instead of a list of paths: one line saying so, exit 1, no records.
ocr - < "$DATA/images/photo.jpg" > "$TMP/stdin-image.out" 2> "$TMP/stdin-image.err"
check "an image on stdin for '-' exits 1 in one line naming what it is" \
  "[ $? -eq 1 ] && [ \$(wc -l < '$TMP/stdin-image.err') -eq 1 ] && grep -q 'stdin holds a jpeg image, not a list of paths' '$TMP/stdin-image.err' && [ ! -s '$TMP/stdin-image.out' ] || dump '$TMP/stdin-image.err'"
printf 'a.png\0b.png\0' | ocr - > "$TMP/stdin-nul.out" 2> "$TMP/stdin-nul.err"
check "... and so do NUL-separated names" "[ $? -eq 1 ] && grep -q 'NUL bytes' '$TMP/stdin-nul.err' || dump '$TMP/stdin-nul.err'"

# --- --batch: files answered together give the same records, in input order.
# The list mixes good files, bad files and copies of files still in flight.
MIXED="$TMP/mixed.txt"
printf '%s\n' "$IN/small.png" "$IN/cut.jpg" "$DUP" "$IN/notes.png" "$IN/photo.jpg" > "$MIXED"
ocr -n 16 --prompt "What is in the image?" - < "$MIXED" > "$TMP/batch1.jsonl" 2> "$TMP/batch1.err"
for b in 3 8; do
  ocr -n 16 --prompt "What is in the image?" --batch $b -v - < "$MIXED" > "$TMP/batch$b.jsonl" 2> "$TMP/batch$b.err"
  rc=$?
  check "--batch $b over good, bad and duplicate files exits 3" "[ $rc -eq 3 ] || { cat '$TMP/batch$b.err'; false; }"
  check "... the same records as --batch 1 (but ms), in input order" \
    "python3 -c 'import json,sys; a,b=([{k:v for k,v in json.loads(l).items() if k!=\"ms\"} for l in open(f)] for f in sys.argv[1:]); sys.exit(0 if a==b and len(a)==8 else 1)' '$TMP/batch1.jsonl' '$TMP/batch$b.jsonl'"
  check "... small.png has the one_image reference tokens" \
    "python3 -c 'import json,sys; r=$records; sys.exit(0 if r[0][\"tokens\"]==json.load(open(\"$TMP/one_image.expected\")) else 1)' '$TMP/batch$b.jsonl'"
  check "... copies in flight are computed once" "grep -q 'computed 2, reused 4' '$TMP/batch$b.err' || { cat '$TMP/batch$b.err'; false; }"
  check "... -v reports the decode throughput of the batch" "grep -q 'tokens/s with --batch $b' '$TMP/batch$b.err'"
done
"$QVL" ocr --model "$MODEL" --batch 0 "$IN" > /dev/null 2>&1
check "--batch 0 is a usage error (2)" "[ $? -eq 2 ]"

# --- Killed runs. Distinct bytes (a suffix after the JPEG's end) so every file is computed.
MANY="$TMP/many"
mkdir -p "$MANY"
for i in $(seq -w 1 24); do { cat "$DATA/images/photo.jpg"; printf '%s' "$i"; } > "$MANY/p$i.jpg"; done
# A complete record set: every file exactly once among the complete lines; at
# most one line (a killed run's cut-off record) does not parse.
complete='import json, sys
ok = []; bad = 0
for line in open(sys.argv[1]).read().split("\n")[:-1]:
    try: ok.append(json.loads(line)["file"])
    except ValueError: bad += 1
n = int(sys.argv[2])
assert len(ok) == n and len(set(ok)) == n and bad <= 1, f"{len(ok)} records, {len(set(ok))} files, {bad} bad lines"'
wait_for_records() {  # file count: until it holds count lines (10 s at most)
  for _ in $(seq 100); do [ -f "$1" ] && [ "$(lines "$1")" -ge "$2" ] && return 0; sleep 0.1; done
  return 1
}

KILLED="$TMP/killed.jsonl"
# Started directly, not through ocr(): the signal must reach qvl, not a subshell.
"$QVL" ocr --model "$MODEL" --dtype f32 -n 8 --output "$KILLED" "$MANY" 2>/dev/null &
pid=$!
wait_for_records "$KILLED" 2
kill -KILL $pid 2>/dev/null
wait $pid 2>/dev/null
check "SIGKILL mid-run leaves complete lines and at most one partial last line" \
  "python3 -c 'import json,sys; t=open(sys.argv[1]).read(); [json.loads(l) for l in t.split(\"\\n\")[:-1]]' '$KILLED' && [ \$(lines '$KILLED') -lt 24 ]"
ocr -n 8 --output "$KILLED" --resume "$MANY" 2>/dev/null
check "... and --resume completes the set" "python3 -c '$complete' '$KILLED' 24"

# A partial last line (what a kill during a write leaves): the resumed run starts a new line.
head -n 23 "$KILLED" > "$TMP/cut.jsonl"
tail -n 1 "$KILLED" | head -c 40 >> "$TMP/cut.jsonl"
ocr -n 8 --output "$TMP/cut.jsonl" --resume "$MANY" 2> "$TMP/cut.err"
check "a partial last line is ignored and the file continues on a new line" \
  "python3 -c '$complete' '$TMP/cut.jsonl' 24 && grep -q 'done 1, failed 0, skipped 23' '$TMP/cut.err'"

INT="$TMP/interrupted.jsonl"
"$QVL" ocr --model "$MODEL" --dtype f32 -n 8 --output "$INT" "$MANY" 2> "$TMP/int.err" &
pid=$!
wait_for_records "$INT" 2
kill -INT $pid
wait $pid
rc=$?
check "SIGINT stops the batch with exit 130" "[ $rc -eq 130 ] || { cat '$TMP/int.err'; false; }"
check "... saying so, without counting 0 files as started" \
  "grep -q 'interrupted' '$TMP/int.err' && ! grep -q 'finishing the 0 file' '$TMP/int.err' || dump '$TMP/int.err'"
check "... after finishing its record: only whole lines, fewer than 24" \
  "python3 -c 'import json,sys; t=open(sys.argv[1]).read(); assert t.endswith(\"\\n\"); [json.loads(l) for l in t.splitlines()]' '$INT' && [ \$(lines '$INT') -lt 24 ]"
ocr -n 8 --output "$INT" --resume "$MANY" 2>/dev/null
check "... and --resume completes it" "python3 -c '$complete' '$INT' 24"

INTB="$TMP/interrupted_batch.jsonl"
"$QVL" ocr --model "$MODEL" --dtype f32 -n 8 --batch 4 --output "$INTB" "$MANY" 2> "$TMP/intb.err" &
pid=$!
wait_for_records "$INTB" 2
kill -INT $pid
wait $pid
rc=$?
check "SIGINT stops a --batch 4 run with exit 130" "[ $rc -eq 130 ] || { cat '$TMP/intb.err'; false; }"
check "... after finishing the files started: only whole lines, fewer than 24" \
  "python3 -c 'import json,sys; t=open(sys.argv[1]).read(); assert t.endswith(\"\\n\"); [json.loads(l) for l in t.splitlines()]' '$INTB' && [ \$(lines '$INTB') -lt 24 ]"
ocr -n 8 --batch 4 --output "$INTB" --resume "$MANY" 2>/dev/null
check "... and --resume with --batch completes it" "python3 -c '$complete' '$INTB' 24"

"$QVL" ocr --bogus-flag > /dev/null 2>&1
check "an unknown flag exits 2" "[ $? -eq 2 ]"

exit $fail
