"""Create one framework environment of the integration tests (``.ci/setup-*.sh`` call it).

    .venv/bin/python .ci/framework_env.py NAME VENV EXTRA PIN...

``VENV`` (``.venv-trl``) is a small venv of this interpreter, without pip and without torch. Its
site-packages holds only what the framework's lock (``.ci/locks/<VENV less .venv->.txt``) has and
the repository's ``.venv`` lacks at that exact version, installed with ``uv pip install --no-deps``
(exact pins, no resolver, so no framework's metadata can pull another torch in), and this
repository editable (``bin/leakscope``). A ``.pth`` file puts ``.venv``'s site-packages after its own
(NOTE [A framework venv on .venv]). One torch on disk for all seven venvs: each takes seconds
(uv links the files from its cache) instead of minutes, and a few MiB instead of 1-2 GiB.

The lock is the ``pip freeze --all`` of the venv the framework's pins make when installed the
plain way (torch 2.13.0 first and pinned, then this repository with EXTRA, then the PINs), less
torch, pip and this repository. ``LEAKSCOPE_LOCK=1 .ci/setup-trl.sh`` makes that reference venv
in a temporary folder and rewrites the lock (run it after changing a pin: a PIN the lock does not
have at its version is an error here).

Idempotent: a venv whose ``.pins`` stamp lists exactly what it needs now is kept; any other is
made again, and the stamp is written last. EXTRA is the repository's extra the reference venv
installs (``hf``, ``lightning``, or empty); its packages are in the lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from realbugs.overlays import hidden, kept, uv  # noqa: E402  (the real-bug overlays' rules, shared)
from realbugs.suite import Release, base_packages, canonical, needed  # noqa: E402

LOCKS = ROOT / ".ci" / "locks"
#: the stamp of a made venv: the pins installed in it and the .venv it runs on (written last)
STAMP = ".pins"
#: the module the venv's .pth file imports at start-up (NOTE [A framework venv on .venv])
LINK = "_framework_overlay"
TORCH = "torch==2.13.0"

# NOTE [A framework venv on .venv]
# A framework venv is the repository's .venv with the framework's packages in front: its own
# site-packages comes first on sys.path (the framework's pins shadow .venv's transformers or
# numpy, as in a venv of their own), then ``_framework_overlay.pth`` runs ``site.addsitedir`` on
# .venv's site-packages, so that .venv's ``.pth`` files (this repository's editable install) work
# too. .venv also holds packages the framework's reference venv never had (the test tools,
# transformers 5 beside Lightning): realbugs/hide.py's finder hides them (a library that probes
# ``find_spec("peft")`` behaves as in the reference venv), and the metadata of .venv's copies of
# the packages installed in front. Files keep ``site-packages`` in their paths, so leakscope tells
# library lines from the user's exactly as in a full venv, and reports name them
# ``.venv-trl/lib/python3.11/site-packages/trl/...`` as before. ``<venv>/bin/python`` and
# ``<venv>/bin/leakscope`` need no environment variables: Ray's workers, torchrun's ranks and
# ``leakscope watch``'s job, started with ``sys.executable``, get the same packages.


def read_lock(path: Path) -> tuple[str, ...]:
    """The ``name==version`` lines of a lock (comments and blank lines left out)."""
    lines = (
        line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()
    )
    return tuple(line for line in lines if line)


def lock_path(venv: str) -> Path:
    return LOCKS / f"{venv.removeprefix('.venv-')}.txt"


def project() -> str:
    import tomllib

    return str(
        tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
    )


def write_lock(name: str, venv: str, extra: str, pins: list[str]) -> None:
    """Make the reference venv the plain way (pip; torch first and pinned in every install) in a
    temporary folder and write its ``pip freeze --all`` as the lock."""
    with tempfile.TemporaryDirectory(prefix=f"{name}-lock-") as tmp:
        ref = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(ref)], check=True)
        pip = [str(ref / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, TORCH], check=True)
        subprocess.run([*pip, "-e", f".[{extra}]" if extra else ".", TORCH], cwd=ROOT, check=True)
        subprocess.run([*pip, TORCH, *pins], check=True)
        lines = freeze(ref)
    lock_path(venv).write_text(lock_text(name, venv, extra, pins, lines), encoding="utf-8")
    print(f"{name}: wrote {lock_path(venv).relative_to(ROOT)} ({len(lines)} packages)")


def freeze(ref: Path) -> list[str]:
    """``pip freeze --all`` of the venv ``ref``, less torch, pip and this repository, by name."""
    frozen = subprocess.run(
        [str(ref / "bin" / "python"), "-m", "pip", "freeze", "--all", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    skip = {"torch", "pip", canonical(project())}
    return sorted(
        (line for line in frozen if "==" in line and canonical(line.split("==")[0]) not in skip),
        key=lambda line: canonical(line.split("==")[0]),
    )


def lock_text(name: str, venv: str, extra: str, pins: list[str], lines: list[str]) -> str:
    asked = " ".join([TORCH, f".[{extra}]" if extra else ".", *pins])
    return (
        f"# {venv}: the `pip freeze --all` of the reference venv (asked for: {asked}),\n"
        f"# less torch, pip and this repository. Made by LEAKSCOPE_LOCK=1 .ci/{name}.sh\n"
        + "".join(f"{line}\n" for line in lines)
    )


def link_module(base: str, modules: list[str], dists: list[str]) -> str:
    """The source of the module that the venv's .pth file imports (NOTE [A framework venv on .venv])."""
    return (
        "# Written by .ci/framework_env.py (NOTE [A framework venv on .venv]): .venv's site-packages\n"
        "# behind this venv's own, without the packages this framework's reference venv did not have.\n"
        "import importlib.util\n"
        "import site\n"
        "import sys\n"
        "from importlib.machinery import PathFinder\n\n"
        f"BASE = {base!r}\n"
        "site.addsitedir(BASE)\n"
        f"_spec = importlib.util.spec_from_file_location('_framework_overlay_hide', {str(ROOT / 'realbugs' / 'hide.py')!r})\n"
        "_hide = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_hide)\n"
        "_finder = _hide.HidingPathFinder(\n"
        f"    {modules!r},\n"
        f"    {dists!r},\n"
        "    [BASE],\n"
        ")\n"
        "sys.meta_path[:] = [_finder if entry is PathFinder else entry for entry in sys.meta_path]\n"
    )


def make(name: str, venv: Path, release: Release, pins: list[str], base: str) -> None:
    """Make ``venv`` afresh: this interpreter's venv, without pip, with ``pins`` and this repository."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    write_link(venv, release, pins, base)
    install = [uv(), "pip", "install", "--quiet", "--python", python, "--no-deps"]
    if pins:
        subprocess.run([*install, *pins], check=True)
    # Built with the setuptools the venv sees (.venv's, or the framework's own): a second, where an
    # isolated build takes several.
    subprocess.run([*install, "--no-build-isolation", "-e", str(ROOT)], check=True)
    # The framework's pins as the venv's interpreter sees them, and the one torch (.venv's).
    subprocess.run(
        [
            python,
            "-c",
            (
                "import sys; from importlib.metadata import version; "
                "print(sys.argv[1] + ':', sys.argv[2] + ':', ', '.join(f'{p} {version(p)}' for p in sys.argv[3:]))"
            ),
            name,
            venv.name,
            *(canonical(pin.split("==")[0]) for pin in release.pins),
            "torch",
        ],
        check=True,
    )


def write_link(venv: Path, release: Release, pins: list[str], base: str) -> None:
    """Write the venv's .pth file and the module it imports; again on every run, as .venv may have
    gained packages to hide (the bench extra, after the tests)."""
    site_dir = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    modules, dists = hidden(release, kept())
    shown_again = {canonical(pin.split("==")[0]) for pin in pins} | {canonical(project())}
    (site_dir / f"{LINK}.py").write_text(
        link_module(base, modules, sorted(set(dists) | shown_again)), encoding="utf-8"
    )
    (site_dir / f"{LINK}.pth").write_text(f"import {LINK}\n", encoding="utf-8")


def main(argv: list[str]) -> int:
    name, venv_name, extra, *pins = argv
    lock = lock_path(venv_name)
    if os.environ.get("LEAKSCOPE_LOCK") == "1":
        write_lock(name, venv_name, extra, pins)
    if not lock.is_file():
        print(
            f"{name}: no lock {lock.relative_to(ROOT)}; make it with LEAKSCOPE_LOCK=1",
            file=sys.stderr,
        )
        return 2
    locked = read_lock(lock)
    have = {canonical(line.split("==")[0]): line.split("==")[1] for line in locked}
    stale = [pin for pin in pins if have.get(canonical(pin.split("==")[0])) != pin.split("==")[1]]
    if stale:
        print(
            f"{name}: {lock.relative_to(ROOT)} does not have {', '.join(stale)}; make it again with LEAKSCOPE_LOCK=1",
            file=sys.stderr,
        )
        return 2
    release = Release(bug=name, side="", version="", pins=tuple(pins), lock=locked)
    want = needed(release, base_packages())
    base = sysconfig.get_paths()["purelib"]
    venv = ROOT / venv_name
    stamp = venv / STAMP
    text = f"# on {base}\n" + "".join(f"{pin}\n" for pin in want)
    started = time.monotonic()
    if (
        (venv / "bin" / "python").exists()
        and stamp.is_file()
        and stamp.read_text(encoding="utf-8") == text
    ):
        write_link(venv, release, want, base)
        print(f"{name}: {venv_name} is up to date")
        return 0
    make(name, venv, release, want, base)
    stamp.write_text(text, encoding="utf-8")
    print(
        f"{name}: {venv_name}: installed {len(want)} packages in front of .venv in {time.monotonic() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
