"""Find the file on the host that the loaded module came from, by matching srcversion.

Candidates come from lib/modules/<release>/modules.dep plus the directories out-of-tree
builds use (updates/, updates/dkms/, extra/) and the in-tree location. A candidate matches
when its `.modinfo` srcversion equals the loaded module's; its appended signature is read
then (gpuctl/common/module_signature.py). A module KMM loaded from its
container (under /opt there) has no file on the host: no match, and that is not an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.hostfs import HostFiles
from agent.modinfo import ModinfoError, decompress_module, elf_section, parse_modinfo
from agent.warninglog import WarningLog
from gpuctl.common.module_signature import SignatureFacts, SignatureFormatError, read_signature

MODULE_SUFFIXES = (".ko", ".ko.zst", ".ko.xz", ".ko.gz")
SEARCH_DIRS = ("updates", "updates/dkms", "extra", "kernel/drivers/gpu/drm/xe")


@dataclass(frozen=True, slots=True)
class ModuleFile:
    # Path on the host, e.g. "/lib/modules/6.8.0-60-generic/updates/dkms/xe.ko.zst".
    host_path: str
    modinfo: dict[str, list[str]]
    # Its appended signature; None when unsigned (or unreadable: `signature_error` says).
    signature: SignatureFacts | None = None
    signature_error: str = ""

    def first(self, key: str) -> str:
        values = self.modinfo.get(key)
        return values[0] if values else ""


RELEASE_PATH = "proc/sys/kernel/osrelease"


def is_directory_name(name: str) -> bool:
    """True for a name that is one directory entry: no "/", NUL, "." or ".."."""
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def is_module_file_for(filename: str, module: str) -> bool:
    """True for "xe.ko", "xe.ko.zst", ... of module "xe" ("-" and "_" are the same)."""
    base = filename.rsplit("/", 1)[-1].replace("-", "_")
    return any(base == module + suffix for suffix in MODULE_SUFFIXES)


def candidate_files(files: HostFiles, release: str, module: str, log: WarningLog) -> list[str]:
    """Host-root-relative paths of files that may hold `module` for kernel `release`."""
    base = f"lib/modules/{release}"
    found: list[str] = []
    dep_path = f"{base}/modules.dep"
    try:
        dep_text = files.read_text(dep_path)
    except FileNotFoundError:
        dep_text = ""
    except (OSError, UnicodeDecodeError) as error:
        log.add_error(dep_path, error)
        dep_text = ""
    for line in dep_text.splitlines():
        path = line.partition(":")[0].strip()
        if ".." in path.split("/"):
            continue  # never outside the host root
        if path and is_module_file_for(path, module):
            found.append(path.lstrip("/") if path.startswith("/") else f"{base}/{path}")
    for directory in SEARCH_DIRS:
        try:
            names = files.list_dir(f"{base}/{directory}")
        except OSError:
            continue  # the usual case: this kind of install is not on the node
        found.extend(
            f"{base}/{directory}/{name}" for name in names if is_module_file_for(name, module)
        )
    return list(dict.fromkeys(found))


def find_loaded_module_file(
    files: HostFiles, release: str, module: str, srcversion: str, log: WarningLog
) -> ModuleFile | None:
    """The candidate whose srcversion is the loaded module's, or None."""
    if not srcversion or not release:
        return None
    if not is_directory_name(release):
        log.add(RELEASE_PATH, f"kernel release {release[:64]!r} cannot name a directory")
        return None
    for relative in candidate_files(files, release, module, log):
        try:
            data = files.read_bytes(relative)
        except FileNotFoundError:
            continue  # listed in modules.dep but not installed
        except OSError as error:
            log.add_error(relative, error)
            continue
        try:
            image = decompress_module(data, relative)
            modinfo = parse_modinfo(elf_section(image, ".modinfo"))
        except ModinfoError as error:
            log.add(relative, f"unreadable module file: {error}")
            continue
        if srcversion in modinfo.get("srcversion", []):
            try:
                signature, problem = read_signature(image), ""
            except SignatureFormatError as error:
                signature, problem = None, str(error)
                log.add(relative, f"unreadable module signature: {error}")
            return ModuleFile("/" + relative, modinfo, signature, problem)
    return None
