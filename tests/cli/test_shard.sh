#!/usr/bin/env bash
# qvl ocr --shard K/N and --merge on the tiny model: three shards are disjoint,
# each file's shard is SHA-256 of its path relative to the folder argument (as
# documented), and their merge equals one run over the same folder but for
# "ms" — also after files were added and every shard ran again with --resume
# (old files keep their shard and are not recomputed), and after a file changed.
# The merge refuses incomplete, overlapping, foreign or still-written shard
# outputs and writes nothing then.
source "$(dirname "$0")/common.sh" "$@"
# Absolute: one check runs from another working directory.
QVL=$(realpath "$QVL") MODEL=$(realpath "$MODEL")
mkdir -p "$QVL_CACHE_DIR" && QVL_CACHE_DIR=$(realpath "$QVL_CACHE_DIR")
ocr() { "$QVL" ocr --model "$MODEL" --dtype f32 -n 4 --threads 1 "$@"; }

# same_records A B: the same records in the same order, "ms" aside.
same_records() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = ([{k: v for k, v in json.loads(l).items() if k != "ms"} for l in open(f)] for f in sys.argv[1:])
if a != b:
    print(f"  {sys.argv[1]}: {len(a)} records, {sys.argv[2]}: {len(b)}")
    for x, y in zip(a, b):
        if x != y: print(f"  first difference:\n  {x}\n  {y}"); break
    sys.exit(1)
PY
}
# shards_check FOLDER N SHARD_OUTPUT...: every record is in the shard that
# sha256(path relative to FOLDER) mod N names, and no file is in two outputs
# (a file that changed between --resume runs has two records in its own).
shards_check() {
  python3 - "$@" <<'PY'
import hashlib, json, sys
folder, n, outs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
seen = {}
for k, out in enumerate(outs):
    for line in open(out):
        f = json.loads(line)["file"]
        rel = f[len(folder) + 1:]
        want = int(hashlib.sha256(rel.encode()).hexdigest()[:16], 16) % n
        assert want == k, f"{f} is in shard {k}, sha256({rel!r}) says {want}"
        assert seen.get(f, k) == k, f"{f} is in shards {seen[f]} and {k}"
        seen[f] = k
print(f"  {len(seen)} files in {len(outs)} shards")
PY
}

# A folder with a subfolder, two pairs of identical files (which may fall in
# different shards), a file that is not an image, and one the scan skips.
IN="$TMP/archive"
mkdir -p "$IN/sub"
for i in 1 2 3 4 5; do { cat "$DATA/images/small.png"; printf '%s' "$i"; } > "$IN/p$i.png"; done
cp "$DATA/images/photo.jpg" "$IN/photo.jpg"
cp "$DATA/images/photo.jpg" "$IN/sub/photo-copy.jpg"
cp "$IN/p1.png" "$IN/sub/p1-copy.png"
printf 'hello' > "$IN/sub/notes.png"
printf 'skipped' > "$IN/readme.txt"

ocr -r --output "$TMP/single.jsonl" "$IN" 2> "$TMP/single.err"
check "one run over the folder exits 3 (one bad file)" "[ $? -eq 3 ] || dump '$TMP/single.err'"
for k in 0 1 2; do
  ocr -r --shard $k/3 --output "$TMP/s$k.jsonl" "$IN" 2> "$TMP/s$k.err"
  rc=$?
  check "--shard $k/3 exits 0 or 3" "[ $rc -eq 0 ] || [ $rc -eq 3 ] || dump '$TMP/s$k.err'"
  check "... and says how many of the 9 files are its own" "grep -q 'shard $k/3: [0-9]* of the 9 files' '$TMP/s$k.err' || dump '$TMP/s$k.err'"
done
check "the three shards are disjoint, by sha256 of the relative path" \
  "shards_check '$IN' 3 '$TMP/s0.jsonl' '$TMP/s1.jsonl' '$TMP/s2.jsonl'"
check "... and hold 9 records together" "[ \$(cat '$TMP'/s[012].jsonl | wc -l) -eq 9 ]"

run ocr -r --output "$TMP/merged.jsonl" "$IN" --merge "$TMP/s0.jsonl" "$TMP/s1.jsonl" "$TMP/s2.jsonl"
check "--merge exits 0" "[ $status -eq 0 ] || dump '$TMP/err'"
check "... says every input is there once" "grep -q '9 records (1 errors) for 9 inputs from 3 shard outputs, each input once' '$TMP/err' || dump '$TMP/err'"
check "... and writes what one run writes, but for ms" "same_records '$TMP/single.jsonl' '$TMP/merged.jsonl'"
check "... duplicate_of included (two pairs of copies)" "[ \$(grep -c duplicate_of '$TMP/merged.jsonl') -eq 2 ]"
# The shard outputs in another order, the paths after --: the same file.
run ocr --merge "$TMP/s2.jsonl" "$TMP/s0.jsonl" "$TMP/s1.jsonl" -o "$TMP/merged2.jsonl" -r -- "$IN"
check "shard outputs in any order, paths after --: the same merge" \
  "[ $status -eq 0 ] && cmp -s '$TMP/merged.jsonl' '$TMP/merged2.jsonl' || dump '$TMP/err'"

# --- Refusals, each leaving the output as it was.
cp "$TMP/merged.jsonl" "$TMP/kept.jsonl"
run ocr -r "$IN" -o "$TMP/merged.jsonl" --merge "$TMP/s0.jsonl" "$TMP/s1.jsonl" "$TMP/s2.jsonl"
check "an existing merged output is refused without --force" "[ $status -eq 1 ] && grep -q -- '--force' '$TMP/err' || dump '$TMP/err'"
run ocr -r "$IN" -o "$TMP/part.jsonl" --merge "$TMP/s0.jsonl" "$TMP/s1.jsonl"
check "a shard output left out: exit 1, the missing files named" \
  "[ $status -eq 1 ] && grep -q 'no record: ' '$TMP/err' && grep -q 'have no record' '$TMP/err' || dump '$TMP/err'"
check "... and nothing written" "[ ! -e '$TMP/part.jsonl' ] && [ -z \"\$(ls -A '$TMP' | grep merging)\" ]"
cp "$TMP/s1.jsonl" "$TMP/s1-copy.jsonl"
run ocr -r "$IN" --merge "$TMP/s0.jsonl" "$TMP/s1.jsonl" "$TMP/s2.jsonl" "$TMP/s1-copy.jsonl"
check "a shard given twice (a copy): files in two shard outputs" \
  "[ $status -eq 1 ] && grep -q 'in two shard outputs' '$TMP/err' && [ ! -s '$TMP/out' ] || dump '$TMP/err'"
run ocr "$IN" --merge "$TMP/s0.jsonl" "$TMP/s1.jsonl" "$TMP/s2.jsonl"
check "other input arguments (no -r): files not among the inputs" \
  "[ $status -eq 1 ] && grep -q 'not among the inputs: $IN/sub/' '$TMP/err' || dump '$TMP/err'"
run ocr -r --merge "$IN" -- "$IN"
check "a folder given as a shard output: exit 1, says where the paths go" \
  "[ $status -eq 1 ] && grep -q 'is a directory' '$TMP/err' && grep -q -- 'after --' '$TMP/err' || dump '$TMP/err'"
run ocr -r --merge "$TMP/s0.jsonl" "$IN/readme.txt" -- "$IN"
check "a file that is not qvl's JSONL given as a shard output: exit 1, names it" \
  "[ $status -eq 1 ] && grep -q 'readme.txt: line 1 is not a qvl ocr record' '$TMP/err' || dump '$TMP/err'"
# A shard run still writing holds an exclusive flock on its output: this shell does the same.
exec 9< "$TMP/s1.jsonl"
flock -x 9
run ocr -r "$IN" --merge "$TMP/s0.jsonl" "$TMP/s1.jsonl" "$TMP/s2.jsonl"
exec 9<&-
check "a shard output still being written (locked) is refused" \
  "[ $status -eq 1 ] && grep -q 'being written by a running qvl ocr' '$TMP/err' || dump '$TMP/err'"
check "the merged output survived every refusal" "cmp -s '$TMP/merged.jsonl' '$TMP/kept.jsonl'"
run ocr -r --resume -o "$TMP/x.jsonl" "$IN" --merge "$TMP/s0.jsonl"
check "--merge with --resume is a usage error (2)" "[ $status -eq 2 ]"
run ocr --shard 3/3 "$IN"
check "--shard 3/3 is a usage error (2) saying K counts from 0" "[ $status -eq 2 ] && grep -q '0 to 2' '$TMP/err' || dump '$TMP/err'"
env -u SLURM_ARRAY_TASK_ID "$QVL" ocr --shard slurm "$IN" > "$TMP/out" 2> "$TMP/err"
status=$?
check "--shard slurm outside a job array: exit 2, says so" \
  "[ $status -eq 2 ] && grep -q 'SLURM_ARRAY_TASK_ID is not set' '$TMP/err' || dump '$TMP/err'"
SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=3 ocr -r --shard slurm "$IN" > "$TMP/slurm1.jsonl" 2>/dev/null
check "--shard slurm reads SLURM_ARRAY_TASK_ID/COUNT: the same records as --shard 1/3" \
  "same_records '$TMP/s1.jsonl' '$TMP/slurm1.jsonl'"

# --- Files added (at the top level and in a new subfolder) and one changed
# between two rounds of --resume: old files keep their shard and are not
# recomputed; the merge equals one fresh run over the grown folder.
for k in 0 1 2; do cp "$TMP/s$k.jsonl" "$TMP/round1-s$k.jsonl"; done
mkdir -p "$IN/new"
for i in 6 7 8 9; do { cat "$DATA/images/small.png"; printf '%s' "$i"; } > "$IN/new/q$i.png"; done
{ cat "$DATA/images/small.png"; printf 'a'; } > "$IN/a0.png"
{ cat "$DATA/images/small.png"; printf 'changed'; } > "$IN/p2.png"
for k in 0 1 2; do
  ocr -r --shard $k/3 --resume --output "$TMP/s$k.jsonl" "$IN" 2> "$TMP/r$k.err"
  rc=$?
  check "round 2, --shard $k/3 --resume exits 0 or 3" "[ $rc -eq 0 ] || [ $rc -eq 3 ] || dump '$TMP/r$k.err'"
  check "... its first round's records are still its first lines" \
    "[ \"\$(head -c \$(stat -c %s '$TMP/round1-s$k.jsonl') '$TMP/s$k.jsonl' | md5sum)\" = \"\$(md5sum < '$TMP/round1-s$k.jsonl')\" ]"
done
check "round 2: 15 records (9 + 5 new + p2.png again), the 8 unchanged old files skipped" \
  "[ \$(cat '$TMP'/s[012].jsonl | wc -l) -eq 15 ] && [ \$(cat '$TMP'/r[012].err | sed -n 's/.*skipped \\([0-9]*\\),.*/\\1/p' | awk '{ s += \$1 } END { print s }') -eq 8 ] || dump '$TMP'/r[012].err"
check "... shards still disjoint and by the documented hash" \
  "shards_check '$IN' 3 '$TMP/s0.jsonl' '$TMP/s1.jsonl' '$TMP/s2.jsonl'"
ocr -r --output "$TMP/single2.jsonl" "$IN" 2> /dev/null
run ocr -r "$IN" -o "$TMP/merged.jsonl" --force --merge "$TMP/s0.jsonl" "$TMP/s1.jsonl" "$TMP/s2.jsonl"
check "the merge of round 2 (--force replaces the old merge) exits 0" "[ $status -eq 0 ] || dump '$TMP/err'"
check "... leaves out the changed file's old record and says so" "grep -q '1 older record(s) of changed files left out' '$TMP/err' || dump '$TMP/err'"
check "... and equals one fresh run over the grown folder, but for ms" "same_records '$TMP/single2.jsonl' '$TMP/merged.jsonl'"

# --- Names that are not UTF-8 (a\xe9b.png and a\xffb.png read alike): the
# merge tells them apart by their exact bytes.
NU="$TMP/nonutf8"
mkdir -p "$NU"
for i in 1 2 3 4 5 6; do
  { cat "$DATA/images/small.png"; printf '%s' "$i"; } > "$NU/n$i"$'\xe9'".png"
  { cat "$DATA/images/small.png"; printf 'x%s' "$i"; } > "$NU/n$i"$'\xff'".png"
done
ocr --output "$TMP/nu-single.jsonl" "$NU" 2> /dev/null
for k in 0 1; do ocr --shard $k/2 --output "$TMP/nu-s$k.jsonl" "$NU" 2> /dev/null; done
run ocr "$NU" -o "$TMP/nu-merged.jsonl" --merge "$TMP/nu-s0.jsonl" "$TMP/nu-s1.jsonl"
check "--merge of shards with names that are not UTF-8 exits 0" "[ $status -eq 0 ] || dump '$TMP/err'"
check "... and equals one run, but for ms" "same_records '$TMP/nu-single.jsonl' '$TMP/nu-merged.jsonl'"

# --- A shard whose run was killed while writing page 2 of a 2-page TIFF (its
# last line cut): the merge names the missing page and writes nothing.
PG="$TMP/paged"
mkdir -p "$PG"
cp "$DATA/images/small.png" "$PG/a.png" && cp "$DATA/images/formats/pages2.tif" "$PG/scan.tif"
ocr --output "$TMP/pg-full.jsonl" "$PG" 2> /dev/null
check "a 2-page TIFF's page records say \"pages\": 2" \
  "[ \$(grep -c '\"page\":[12],\"pages\":2,' '$TMP/pg-full.jsonl') -eq 2 ] || dump '$TMP/pg-full.jsonl'"
{ head -n 2 "$TMP/pg-full.jsonl"; tail -n 1 "$TMP/pg-full.jsonl" | head -c 50; } > "$TMP/pg-cut.jsonl"
run ocr "$PG" -o "$TMP/pg-merged.jsonl" --merge "$TMP/pg-cut.jsonl"
check "--merge of a shard lacking the last page of a TIFF: exit 1, the page named" \
  "[ $status -eq 1 ] && grep -q 'missing pages: $PG/scan.tif: page 2 of 2 missing' '$TMP/err' || dump '$TMP/err'"
check "... and nothing written" "[ ! -e '$TMP/pg-merged.jsonl' ]"
ocr --resume --output "$TMP/pg-cut.jsonl" "$PG" 2> /dev/null
run ocr "$PG" -o "$TMP/pg-merged.jsonl" --merge "$TMP/pg-cut.jsonl"
check "... which --resume completes" "[ $status -eq 0 ] && same_records '$TMP/pg-full.jsonl' '$TMP/pg-merged.jsonl' || dump '$TMP/err'"

# A folder given as the path relative to another working directory splits
# the same way: the key is the path below the folder argument.
(cd "$TMP" && ocr -r --shard 0/3 "archive" > "$TMP/rel0.jsonl" 2> /dev/null)
check "the split does not depend on how the folder is named" \
  "[ \"\$(python3 -c 'import json,sys; print(sorted(set(json.loads(l)[\"file\"].split(\"archive/\",1)[1] for l in open(sys.argv[1]))))' '$TMP/rel0.jsonl')\" = \"\$(python3 -c 'import json,sys; print(sorted(set(json.loads(l)[\"file\"].split(\"archive/\",1)[1] for l in open(sys.argv[1]))))' '$TMP/s0.jsonl')\" ]"

exit $fail
