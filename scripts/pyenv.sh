#!/usr/bin/env bash
# Create (once) and print the path of a cached Python virtual environment for test
# oracles and real clients. Python never runs in the serving path.
#   VENV=$(scripts/pyenv.sh NAME pkg==1.2 other==3.4)   # then $VENV/bin/python ...
# The environment lives in ${NIBBLE_VENV_DIR:-$HOME/.cache/nibble}/venv-NAME and is reused
# while its package list is unchanged (a stamp file holds the list).
set -euo pipefail
name=$1; shift
root=${NIBBLE_VENV_DIR:-$HOME/.cache/nibble}
venv=$root/venv-$name
want="$*"
mkdir -p "$root"
exec 9>"$root/.lock-$name"
flock 9
if [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$want" ]; then
  echo "$venv"; exit 0
fi
rm -rf "$venv"
py=$(command -v python3)
"$py" -m venv "$venv" >&2
"$venv/bin/pip" install -q --disable-pip-version-check "$@" >&2
echo "$want" > "$venv/.stamp"
echo "$venv"
