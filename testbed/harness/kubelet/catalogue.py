"""The registry of module images a test controls: one folder per image reference.

KMM looks for a Module's image twice. Its pull Pod asks whether the image exists
(ModuleImagesConfig); the worker Pod's init container copies ``/opt/lib/modules/<kernel>`` out
of it. Here an image is the folder ``<root>/<reference, quoted>/`` holding the image's files,
and a reference without a folder is one the registry does not have: its pull fails with the
kubelet's ``ErrImagePull``. ``add_xe_image`` writes the usual one: an out-of-tree ``xe.ko`` (a
real ELF module whose ``.modinfo`` names its version) for each kernel given, with the
modules and firmware a backport build ships beside it; its modules are unsigned, or signed
with a test key (``signed_with``) as ``sign-file`` signs them. ``put`` stores an image built
elsewhere (KMM's sign Pods push theirs: ``sign_pod``). An image's top-level folders are
mounted over the machine's at the same paths in its containers (``containers``): only
folders the machine has, or that may be created empty as mount points, belong in one.
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from testbed.fakehost.elf import module_image
from testbed.fakehost.signing import SigningKey, signed

MODULES_DIR = "opt/lib/modules"


class ImageCatalogue:
    """Module images by reference, as folders under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def folder(self, image: str) -> Path:
        return self.root / urllib.parse.quote(image, safe="")

    def has(self, image: str) -> bool:
        return self.folder(image).is_dir()

    def add_module_image(
        self,
        image: str,
        kernels: Iterable[str],
        modules: Mapping[str, Mapping[str, str | Sequence[str]]],
        files: Mapping[str, bytes] | None = None,
        *,
        signed_with: SigningKey | None = None,
    ) -> Path:
        """An image holding module files (``updates/<name>.ko`` with its modinfo, listed in
        ``modules.dep``) built for each of ``kernels``, and other ``files`` by path; the
        modules signed with ``signed_with`` (None: unsigned)."""
        folder = self.folder(image)
        folder.mkdir(parents=True, exist_ok=True)
        for kernel in kernels:
            base = folder / MODULES_DIR / kernel
            (base / "updates").mkdir(parents=True, exist_ok=True)
            for name, modinfo in modules.items():
                data = module_image(modinfo)
                if signed_with is not None:
                    data = signed(data, signed_with)
                (base / "updates" / f"{name}.ko").write_bytes(data)
            dep = "".join(f"updates/{name}.ko:\n" for name in modules)
            (base / "modules.dep").write_text(dep)
        for relative, data in (files or {}).items():
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return folder

    def add_xe_image(
        self,
        image: str,
        kernels: Iterable[str],
        *,
        version: str,
        srcversion: str,
        companions: Sequence[str] = (),
        firmware: Sequence[str] = (),
        signed_with: SigningKey | None = None,
    ) -> Path:
        """The out-of-tree xe at ``version`` for each of ``kernels``; ``companions``: the
        modules a backport build ships beside it (its own ``drm_gpuvm``, ...); ``firmware``:
        blobs under ``firmware/xe/`` (a GPUDriver's ``firmwarePath: /firmware/xe``);
        ``signed_with``: the key every module is signed with (None: unsigned)."""
        modules: dict[str, Mapping[str, str | Sequence[str]]] = {
            "xe": {
                "name": "xe",
                "version": version,
                "srcversion": srcversion,
                "license": "GPL and additional rights",
                "alias": [
                    "pci:v00008086d0000E20Bsv*sd*bc03sc*i*",
                    "pci:v00008086d0000E223sv*sd*bc03sc*i*",
                ],
                "parm": ["force_probe:Force probe options (charp)", "max_vfs:Max VFs (uint)"],
            }
        }
        for name in companions:
            modules[name] = {"name": name, "version": version, "license": "GPL"}
        files = {f"firmware/xe/{blob}": b"\0" * 64 for blob in firmware}
        return self.add_module_image(image, kernels, modules, files, signed_with=signed_with)

    def put(self, image: str, built: Path) -> Path:
        """Stores a copy of the folder ``built`` as ``image`` (replacing what ``image`` held),
        all at once: a pull never finds half an image."""
        staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=self.root))
        shutil.copytree(built, staging / "image", symlinks=True)
        folder = self.folder(image)
        if folder.exists():
            folder.rename(staging / "replaced")
        (staging / "image").rename(folder)
        shutil.rmtree(staging)
        return folder

    def remove(self, image: str) -> None:
        shutil.rmtree(self.folder(image), ignore_errors=True)
