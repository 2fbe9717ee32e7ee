#!/usr/bin/env python3
"""Unpack wheels into one folder for a GPU machine that cannot reach a package index.

    python3 .ci/unpack-wheels.py SITE DIR [DIR ...]
    export PYTHONPATH="$(python3 .ci/unpack-wheels.py --path SITE)"

Every ``*.whl`` under the DIRs is extracted into SITE with zipfile (``pip --target``
would overwrite the folder that the nvidia-cutlass-dsl wheels share). A wheel split
with ``split -b`` into ``NAME.whl.part.aa``, ``.ab``, ... is joined first. ``--path``
prints the PYTHONPATH entries the folder needs: SITE itself, and the
``nvidia_cutlass_dsl/dsl_packages`` folder that a normal install adds through a .pth
file (which Python does not read from PYTHONPATH). A wheel's programs
(``NAME.data/scripts/*``, such as actionlint and zizmor) are copied to ``SITE/bin``
and made executable, as pip would install them; put that folder on PATH.
"""
from __future__ import annotations

import pathlib
import sys
import zipfile


def joined_parts(folder: pathlib.Path) -> list[pathlib.Path]:
    """Join NAME.whl.part.* into NAME.whl inside ``folder``; return the joined wheels."""
    out = []
    for first in sorted(folder.glob("*.whl.part.aa")):
        target = folder / first.name.removesuffix(".part.aa")
        with target.open("wb") as whole:
            for part in sorted(folder.glob(target.name + ".part.*")):
                whole.write(part.read_bytes())
        out.append(target)
    return out


def install_scripts(site: pathlib.Path) -> list[pathlib.Path]:
    """Copy each wheel's programs into SITE/bin, executable; a ``#!python`` line names this Python."""
    installed = []
    for script in sorted(site.glob("*.data/scripts/*")):
        target = site / "bin" / script.name
        target.parent.mkdir(exist_ok=True)
        body = script.read_bytes()
        if body.startswith(b"#!python"):
            body = b"#!" + sys.executable.encode() + body[len(b"#!python"):]
        target.write_bytes(body)
        target.chmod(0o755)
        installed.append(target)
    return installed


def extract(wheel: pathlib.Path, site: pathlib.Path) -> None:
    """Extract ``wheel`` into ``site``, restoring the exec bits its entries record."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = pathlib.Path(archive.extract(info, site))
            mode = info.external_attr >> 16  # the Unix mode, where the wheel recorded one
            if not info.is_dir() and mode & 0o111:
                path.chmod(path.stat().st_mode | (mode & 0o111))


def search_path(site: pathlib.Path) -> str:
    entries = [site, site / "nvidia_cutlass_dsl" / "dsl_packages"]
    return ":".join(str(e) for e in entries if e.exists())


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--path":
        print(search_path(pathlib.Path(argv[1])))
        return 0
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    site = pathlib.Path(argv[0])
    site.mkdir(parents=True, exist_ok=True)
    for folder in map(pathlib.Path, argv[1:]):
        joined_parts(folder)
        for wheel in sorted(folder.glob("*.whl")):
            extract(wheel, site)
            print(f"unpacked {wheel.name}")
    for program in install_scripts(site):
        print(f"installed {program}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
