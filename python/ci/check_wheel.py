"""The python leg's wheel check: builds the package's wheel as `pyproject.toml`
configures it (a manylinux tag, which maturin's audit of the glibc symbols the
library uses must pass), checks that its file name carries that tag (pip takes
a manylinux wheel from a package index, and refuses a `linux` one there), and
installs it into a fresh virtual environment, where the package must import
from the wheel rather than from the source tree.

    python ci/check_wheel.py MATURIN [maturin build arguments...]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import venv
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent


def fail(why: str) -> None:
    print(f"check_wheel: {why}", file=sys.stderr)
    sys.exit(1)


def main(maturin: str, build_args: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="tandem-wheel-") as folder:
        folder = Path(folder)
        subprocess.run(
            [maturin, "build", *build_args, "--out", str(folder / "dist")],
            cwd=PACKAGE,
            check=True,
        )
        wheels = sorted((folder / "dist").glob("*.whl"))
        if len(wheels) != 1:
            fail(f"maturin built {len(wheels)} wheels, not one: {wheels}")
        wheel = wheels[0]
        # name-version-python-abi-platform.whl; the platform may hold dots
        # (several tags), each of which must be a manylinux one.
        platforms = wheel.stem.split("-")[-1].split(".")
        if not all(platform.startswith("manylinux_") for platform in platforms):
            fail(f"{wheel.name}: platform {'.'.join(platforms)}, which is no manylinux tag")
        environment = folder / "venv"
        venv.create(environment, with_pip=True)
        python = str(environment / "bin" / "python")
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
            check=True,
        )
        imported = subprocess.run(
            [python, "-c", "import tandem, tandem._tandem; print(tandem.__file__)"],
            cwd=folder,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if not Path(imported).is_relative_to(environment):
            fail(f"tandem imported from {imported}, not from the installed wheel")
        print(f"check_wheel: {wheel.name} installs into a fresh environment and imports")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        fail(__doc__.strip().splitlines()[-1].strip())
    main(sys.argv[1], sys.argv[2:])
