# Sourced by .ci/setup-*.sh: one recipe for every framework venv the integration tests use.
#
#   framework_venv NAME VENV EXTRA PIN...
#
# makes VENV with .ci/framework_env.py (its docstring has the details): a small venv of .venv's
# interpreter, without a torch of its own, holding what the framework's lock (.ci/locks/) has and
# .venv lacks at that version (uv, exact pins, no resolver) and this repository editable, in front
# of .venv's site-packages; reused when it already has those pins. EXTRA is the repository's extra
# and PINs the exact `package==version` specs its reference venv was made with; the lock must have
# every PIN (LEAKSCOPE_LOCK=1 .ci/setup-NAME.sh makes the reference venv the plain way, with pip,
# and writes the lock again). NAME prefixes its messages. Needs .venv (the README's first steps).

framework_venv() {
    .venv/bin/python .ci/framework_env.py "$@"
}
