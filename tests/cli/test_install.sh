#!/usr/bin/env bash
# `cmake --install` of the build folder qvl was built in: the binary, the man
# page and the bash/zsh/fish completions land where Debian looks for them, and
# they describe the commands and flags that `qvl --help` lists.
source "$(dirname "$0")/common.sh" "$@"
BUILD=$(cd "$(dirname "$QVL")/.." && pwd)
PREFIX="$TMP/prefix"
MAN="$PREFIX/share/man/man1/qvl.1"
BASH_FILE="$PREFIX/share/bash-completion/completions/qvl"
ZSH_FILE="$PREFIX/share/zsh/vendor-completions/_qvl"
FISH_FILE="$PREFIX/share/fish/vendor_completions.d/qvl.fish"

cmake --install "$BUILD" --prefix "$PREFIX" > "$TMP/install.log" 2>&1
status=$?
check "cmake --install succeeds" '[ $status -eq 0 ] || dump "$TMP/install.log"'
check "the installed qvl runs" '"$PREFIX/bin/qvl" --version > "$TMP/out" 2>&1 && grep -q "^qvl [0-9]" "$TMP/out" || dump "$TMP/out"'
check "the tiny model and photo are installed" \
  '[ -f "$PREFIX/share/qvl/tiny-qwen3-vl/config.json" ] && [ -f "$PREFIX/share/qvl/photo.jpg" ]'

# The commands and each command's flags, as --help lists them.
commands=$("$QVL" --help | sed -n '/^Subcommands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }')
check "--help lists the commands" '[ "$(echo $commands | wc -w)" -ge 8 ] && echo "$commands" | grep -qx ocr'
# Each qvl start loads libtorch (~1 s): ask for every command's help at once.
for c in $commands; do "$QVL" "$c" --help > "$TMP/help_$c" & done
wait
flags_of() { grep -oE -- '(^|[ ,])--[a-z][a-z0-9-]*' "$TMP/help_$1" | sed 's/^[ ,]*//' | sort -u; }

# --- The man page: one section per command, holding each of its flags.
if command -v man > /dev/null; then
  MANWIDTH=200 man -l "$MAN" > "$TMP/man.txt" 2> "$TMP/man.err"
elif command -v groff > /dev/null; then
  groff -man -Tutf8 "$MAN" | sed 's/.\x08//g' > "$TMP/man.txt" 2> "$TMP/man.err"
elif command -v mandoc > /dev/null; then
  mandoc -Tutf8 "$MAN" | sed 's/.\x08//g' > "$TMP/man.txt" 2> "$TMP/man.err"
else
  sed -e 's/^\.SS "\(.*\)"/   \1/' -e 's/^\.SH /\n/' "$MAN" > "$TMP/man.txt" 2> "$TMP/man.err"
fi
check "the man page renders" '[ -s "$TMP/man.txt" ] && grep -q "^NAME" "$TMP/man.txt" || dump "$TMP/man.err"'
check "the man page has a COMMANDS section" 'grep -q "^COMMANDS" "$TMP/man.txt"'
# The roff source with its escapes undone: rendering may hyphenate a long flag across lines.
sed 's/\\-/-/g' "$MAN" > "$TMP/man.roff"
for c in $commands; do
  check "man: a section for qvl $c" 'grep -qE "^ +qvl $c\$" "$TMP/man.txt" || grep "qvl" "$TMP/man.txt" | head -n 40'
  # The flags between this command's heading and the next one.
  awk -v head=".SS \"qvl $c\"" '$0 == head { on = 1; next } /^\.S[SH] / { on = 0 } on' "$TMP/man.roff" > "$TMP/section"
  missing=""
  for f in $(flags_of "$c"); do grep -q -- "\\\\fB$f\\\\fR" "$TMP/section" || missing="$missing $f"; done
  check "man: qvl $c's section has all its flags" '[ -z "$missing" ] || { echo "missing:$missing"; false; }'
done

# --- bash: call the completion function as bash would for a TAB after WORDS.
complete_bash() {
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _qvl; echo "${COMPREPLY[*]}"' \
    _ "$BASH_FILE" "$@"
}
check "bash: the file registers _qvl for qvl" \
  'bash -c "source \"$BASH_FILE\"; complete -p qvl" | grep -q -- "-F _qvl qvl"'
check "bash: qvl <TAB> gives every command" \
  '[ "$(complete_bash qvl "" | tr " " "\n" | grep -v "^help$" | sort)" = "$(echo "$commands" | sort)" ]'
check "bash: qvl ask --quant <TAB>" '[ "$(complete_bash qvl ask --quant "")" = "none int8 int4" ]'
check "bash: qvl ocr --quant <TAB>" '[ "$(complete_bash qvl ocr --quant "")" = "none int8 int4" ]'
check "bash: qvl ocr --quant=i<TAB>" '[ "$(complete_bash qvl ocr --quant = i)" = "int8 int4" ]'
check "bash: qvl bench --quant <TAB>" '[ "$(complete_bash qvl bench --quant "")" = "none int8 int4" ]'
check "bash: qvl chat --dtype <TAB>" '[ "$(complete_bash qvl chat --dtype "")" = "bf16 f32" ]'
check "bash: qvl ask --load <TAB>" '[ "$(complete_bash qvl ask --load "")" = "lazy eager" ]'
check "bash: qvl ask --image <TAB> leaves it to file names" '[ -z "$(complete_bash qvl ask --image "")" ]'
check "bash: qvl help <TAB> gives the commands" 'complete_bash qvl help "" | grep -qw ocr'
for c in $commands; do
  complete_bash qvl "$c" -- > "$TMP/bash_flags"
  missing=""
  for f in $(flags_of "$c"); do grep -qw -- "$f" "$TMP/bash_flags" || missing="$missing $f"; done
  check "bash: qvl $c --<TAB> gives all its flags" '[ -z "$missing" ] || { echo "missing:$missing"; false; }'
done

# --- zsh and fish: run them where installed; otherwise check the files' text.
for c in $commands; do
  check "zsh, fish: qvl $c is in both files" \
    'grep -q "^    '\''$c:" "$ZSH_FILE" && grep -q -- "-a $c -d" "$FISH_FILE"'
done
check "zsh: --quant completes its values" 'grep -q -- "--quant'\''\[.*\]:TEXT:(none int8 int4)'\''" "$ZSH_FILE"'
check "fish: --quant completes its values" 'grep -q "ocr'\'' -l quant -x -a '\''none int8 int4'\''" "$FISH_FILE"'
if command -v zsh > /dev/null; then
  check "zsh: the file parses" 'zsh -n "$ZSH_FILE"'
else
  echo "note: zsh is not installed; its file was checked as text only"
fi
if command -v fish > /dev/null; then
  check "fish: qvl ocr --quant <TAB>" \
    '[ "$(fish -c "source $FISH_FILE; complete -C \"qvl ocr --quant \"" | cut -f1 | sort | xargs)" = "int4 int8 none" ]'
  check "fish: qvl <TAB> gives the commands" \
    'fish -c "source $FISH_FILE; complete -C \"qvl \"" | cut -f1 | grep -qx ocr'
else
  echo "note: fish is not installed; its file was checked as text only"
fi
exit $fail
