# Sourced by .ci/setup-*.sh: one recipe for every framework venv the integration tests use.
#
#   framework_venv NAME VENV EXTRA PIN...
#
# creates VENV (reused when every PIN's version is already installed there): torch first and
# pinned (TORCH_SPEC, default torch==2.13.0, repeated in every install so that nothing pulls
# another build), then this repository editable with EXTRA (`.[EXTRA]`, or `.` when EXTRA is
# empty), then the PINs (exact `package==version` specs). NAME prefixes its messages.
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

framework_venv() {
    local name=$1 venv=$2 extra=$3
    shift 3
    local pins=("$@")
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "${pins[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
import leakscope  # noqa: F401  (the repository is installed in it)
sys.exit(any(version(spec.split("==")[0]) != spec.split("==")[1] for spec in sys.argv[1:]))
PY
        echo "$name: $venv already has ${pins[*]}"
        return
    fi
    local started=$SECONDS
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install -q "$TORCH_SPEC"
    "$venv/bin/pip" install -q -e ".${extra:+[$extra]}" "$TORCH_SPEC"
    "$venv/bin/pip" install -q "$TORCH_SPEC" "${pins[@]}"
    # pip never replaces torch here (it is pinned in every install), but say so loudly if it did.
    "$venv/bin/python" - "$name" "$venv" "${pins[@]}" <<'PY'
import sys
from importlib.metadata import version
import torch
name, venv, pins = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"{name}: {venv}:", ", ".join(f"{p.split('==')[0]} {version(p.split('==')[0])}" for p in pins), "torch", torch.__version__)
PY
    echo "$name: $venv took $((SECONDS - started)) s"
}
