"""What runs in KMM's sign Pod: kaniko building the Dockerfile KMM wrote, with ``sign-file``
in its sign image, pushing the signed image. The kubelet (``kubelet``) runs it for the Pod.

KMM (internal/buildsign/resource) makes the Pod ``<module>-sign-…`` with one container,
``kaniko`` (image ``$RELATED_IMAGE_BUILD``), args ``--destination <containerImage>`` (or
``--no-push``) and pull/push TLS flags, and three volumes: the Dockerfile from the Pod's
``dockerfile`` annotation (downward API, at ``/workspace/Dockerfile``, where kaniko looks by
default), the keySecret's ``key`` at ``/run/secrets/key/key.pem`` and the certSecret's
``cert`` at ``/run/secrets/cert/cert.pem``. ``SignPod`` plays the kubelet's part of that
(``mount``: the volumes written from the Pod and the Secrets read through the API; a Secret or
key missing is ``VolumeNotReadyError``: the container is not created yet; a kind of volume KMM
does not give a sign Pod is the stand-in's limit, an error) and kaniko's (``build``):

- the Dockerfile read strictly (``sign_dockerfile``); what it does not understand fails the
  build, saying which line;
- each stage's base: an earlier stage, the sign image (``$RELATED_IMAGE_SIGN``: nothing but
  ``/usr/local/bin/sign-file`` matters in it) or an image of the catalogue, copied; an image
  the catalogue lacks fails the build as kaniko fails to fetch it;
- ``COPY --from``: a stage's file or folder into this one (folders merge);
- the sign loop as ``/bin/sh`` runs it: each word glob-expanded in the stage (no match: the
  word itself), ``[ -e file ]`` false for a missing file (status 1), else ``sign-file``
  (status 127 when the stage has no such tool), the key and certificate read as it reads
  them (PEM; one that does not parse, or a key that is not the certificate's, is status 1
  with its words); the loop's status is its last command's, and a non-zero one fails the
  build;
- the last stage is pushed to every ``--destination`` (``ImageCatalogue.put``).

``build`` returns the container's exit code (0, or 1 for a failed build) and its output.
"""

from __future__ import annotations

import base64
import binascii
import glob
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from testbed.fakehost.signing import DIGESTS, sign_file
from testbed.harness.kubelet.catalogue import ImageCatalogue
from testbed.harness.kubelet.sign_dockerfile import Copy, DockerfileError, SignLoop, Stage, parse

SIGN_FILE = "/usr/local/bin/sign-file"
DOCKERFILE = "/workspace/Dockerfile"  # kaniko's default: Dockerfile in the /workspace context
SIGN_POD_RESOURCE_TYPE = "SignImage"  # KMM's kmm.node.kubernetes.io/resource-type of the Pod
_IGNORED_FLAGS = ("--insecure", "--skip-tls-verify", "--insecure-pull", "--skip-tls-verify-pull")
_GLOB = ("*", "?", "[")

ReadSecret = Callable[[str], dict[str, Any] | None]


class VolumeNotReadyError(Exception):
    """A volume cannot be set up yet (its Secret, or the Secret's key, is missing): the
    kubelet's words, as ``kubectl describe pod`` shows them."""


class BuildFailedError(Exception):
    """kaniko stops: exit code 1 with these words."""


class UnsupportedVolumeError(RuntimeError):
    """A volume the stand-in kubelet cannot mount (none that KMM gives a sign Pod)."""


@dataclass
class _Layer:
    """A stage's file system: a folder, and the tools its base image has."""

    root: Path
    tools: frozenset[str] = frozenset()


def _kaniko_arguments(args: list[str]) -> tuple[list[str], bool]:
    """(destinations, no_push) of KMM's kaniko arguments; BuildFailedError for any other flag."""
    destinations: list[str] = []
    no_push = False
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--destination":
            if not rest:
                raise BuildFailedError('Error: flag needs an argument: "--destination"')
            destinations.append(rest.pop(0))
        elif arg.startswith("--destination="):
            destinations.append(arg.removeprefix("--destination="))
        elif arg == "--no-push":
            no_push = True
        elif arg not in _IGNORED_FLAGS:
            raise BuildFailedError(
                f"Error: unknown flag: {arg} (the stand-in kaniko reads KMM's only)"
            )
    if not destinations and not no_push:
        raise BuildFailedError("Error: you must provide --destination, or use --no-push")
    return destinations, no_push


def _secret_files(volume: str, source: dict[str, Any], read_secret: ReadSecret) -> dict[str, bytes]:
    name = source["secretName"]
    secret = read_secret(name)
    if secret is None:
        raise VolumeNotReadyError(
            f'MountVolume.SetUp failed for volume "{volume}" : secret "{name}" not found'
        )
    data = {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}
    items = source.get("items") or [{"key": key, "path": key} for key in sorted(data)]
    files = {}
    for item in items:
        if item["key"] not in data:
            raise VolumeNotReadyError(
                f'MountVolume.SetUp failed for volume "{volume}" : references non-existent '
                f"secret key: {item['key']}"
            )
        files[item["path"]] = data[item["key"]]
    return files


def _downward_files(pod: dict[str, Any], volume: str, source: dict[str, Any]) -> dict[str, bytes]:
    annotations = pod["metadata"].get("annotations") or {}
    files = {}
    for item in source.get("items") or []:
        field_path = item["fieldRef"]["fieldPath"]
        prefix, suffix = "metadata.annotations['", "']"
        if not (field_path.startswith(prefix) and field_path.endswith(suffix)):
            raise UnsupportedVolumeError(f"volume {volume}: {field_path} (annotations only)")
        files[item["path"]] = annotations.get(field_path[len(prefix) : -len(suffix)], "").encode()
    return files


@dataclass
class SignPod:
    """One of KMM's sign Pods, run in ``folder`` (see the module docstring)."""

    pod: dict[str, Any]
    folder: Path
    catalogue: ImageCatalogue
    sign_image: str
    mounts: dict[str, Path] = field(default_factory=dict)
    output: list[str] = field(default_factory=list)

    @property
    def container(self) -> dict[str, Any]:
        return dict(self.pod["spec"]["containers"][0])

    def mount(self, read_secret: ReadSecret) -> None:
        """The container's volumes, at their mount paths: VolumeNotReadyError while one cannot be
        set up."""
        volumes = {volume["name"]: volume for volume in self.pod["spec"].get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in self.container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if mount.get("subPath") or mount.get("subPathExpr"):
                raise UnsupportedVolumeError(f"volume {volume['name']}: a subPath mount")
            if "secret" in volume:
                files = _secret_files(volume["name"], volume["secret"], read_secret)
            elif "downwardAPI" in volume:
                files = _downward_files(self.pod, volume["name"], volume["downwardAPI"])
            elif "projected" in volume:
                continue  # the ServiceAccount token: kaniko never reads it
            else:
                raise UnsupportedVolumeError(f"volume {volume['name']}: {sorted(volume)}")
            folder = self.folder / "volumes" / volume["name"]
            for relative, data in files.items():
                (folder / relative).parent.mkdir(parents=True, exist_ok=True)
                (folder / relative).write_bytes(data)
            mounts[mount["mountPath"].rstrip("/")] = folder
        self.mounts = mounts

    def _mounted(self, path: str) -> Path | None:
        """Where a path of the container's mounts is, if on one."""
        for target in sorted(self.mounts, key=len, reverse=True):
            if path == target or path.startswith(target + "/"):
                return self.mounts[target] / path[len(target) :].lstrip("/")
        return None

    def _in(self, layer: _Layer, path: str) -> Path:
        """``path`` as a RUN step sees it: a mounted volume's, else the stage's."""
        return self._mounted(path) or layer.root / path.lstrip("/")

    def build(self) -> int:
        """kaniko's run: the container's exit code (0: built and pushed); ``output`` holds
        what it printed."""
        try:
            destinations, no_push = _kaniko_arguments(list(self.container.get("args") or []))
            dockerfile = self._mounted(DOCKERFILE)
            if dockerfile is None or not dockerfile.is_file():
                raise BuildFailedError(
                    f"Error: error resolving dockerfile path: {DOCKERFILE}: no such file"
                )
            try:
                stages = parse(dockerfile.read_text())
            except DockerfileError as error:
                raise BuildFailedError(
                    f"error building image: parsing dockerfile: {error}"
                ) from error
            layers: dict[str, _Layer] = {}
            last: _Layer | None = None
            for index, stage in enumerate(stages):
                last = self._stage(index, stage, layers)
                layers[stage.name or str(index)] = last
            assert last is not None  # parse returns a stage at least
            for destination in [] if no_push else destinations:
                self.output.append(f"INFO Pushing image to {destination}")
                self.catalogue.put(destination, last.root)
        except BuildFailedError as failure:
            self.output.append(str(failure))
            return 1
        return 0

    def _base(self, index: int, stage: Stage, layers: dict[str, _Layer]) -> _Layer:
        root = self.folder / "stages" / str(index)
        shutil.rmtree(root, ignore_errors=True)
        if stage.base in layers:
            shutil.copytree(layers[stage.base].root, root, symlinks=True)
            return _Layer(root, layers[stage.base].tools)
        if stage.base == self.sign_image:
            root.mkdir(parents=True)
            return _Layer(root, frozenset({SIGN_FILE}))
        self.output.append(f"INFO Retrieving image {stage.base}")
        if not self.catalogue.has(stage.base):
            raise BuildFailedError(
                f'error building image: retrieving image "{stage.base}": '
                "MANIFEST_UNKNOWN: manifest unknown"
            )
        shutil.copytree(self.catalogue.folder(stage.base), root, symlinks=True)
        return _Layer(root)

    def _stage(self, index: int, stage: Stage, layers: dict[str, _Layer]) -> _Layer:
        layer = self._base(index, stage, layers)
        for step in stage.steps:
            if isinstance(step, Copy):
                self._copy(step, layer, layers)
            else:
                self._sign_loop(step, layer)
        return layer

    def _copy(self, step: Copy, layer: _Layer, layers: dict[str, _Layer]) -> None:
        self.output.append(f"INFO COPY --from={step.stage} {step.source} {step.destination}")
        if step.stage not in layers:
            raise BuildFailedError(f"error building image: COPY --from={step.stage}: no such stage")
        source = layers[step.stage].root / step.source.lstrip("/")
        target = layer.root / step.destination.lstrip("/")
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
        elif source.is_file():
            if step.destination.endswith("/"):
                target = target / source.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        else:
            raise BuildFailedError(
                f"error building image: COPY --from={step.stage} {step.source}: "
                "no such file or directory"
            )

    def _expand(self, layer: _Layer, word: str) -> list[str]:
        """The shell's pathname expansion of ``word`` in the stage: sorted matches, else the
        word itself."""
        if not any(char in word for char in _GLOB):
            return [word]
        # glob.glob, as the shell, leaves out dot files that a pattern does not name
        matches = sorted(glob.glob(word.lstrip("/"), root_dir=layer.root))  # noqa: PTH207
        return ["/" + match for match in matches] or [word]

    def _sign_loop(self, step: SignLoop, layer: _Layer) -> None:
        self.output.append(f"INFO RUN (Dockerfile line {step.line}) sign-file loop")
        status = 0
        for word in step.words:
            for file in self._expand(layer, word):
                if not self._in(layer, file).exists():
                    status = 1  # [ -e "${file}" ] is false: && goes no further
                elif step.tool not in layer.tools:
                    self.output.append(f"/bin/sh: {step.tool}: not found")
                    status = 127
                else:
                    status = self._sign_file(step, layer, file)
        if status != 0:
            raise BuildFailedError(
                "error building image: error building stage: failed to execute command: "
                f"waiting for process to exit: exit status {status}"
            )

    def _sign_file(self, step: SignLoop, layer: _Layer, file: str) -> int:
        """``sign-file <digest> <key> <certificate> <file>``: 0, or 1 with its words."""
        try:
            if step.digest not in DIGESTS:
                raise ValueError(f"{step.digest}: unknown digest algorithm")
            key = self._private_key(step.key, layer)
            certificate = self._certificate(step.certificate, layer)
            if key.public_key() != certificate.public_key():
                raise ValueError("CMS_add1_signer: key values mismatch")
            module = self._in(layer, file)
            module.write_bytes(sign_file(module.read_bytes(), key, certificate, step.digest))
        except ValueError as error:
            self.output.append(f"sign-file: {error}")
            return 1
        return 0

    def _private_key(
        self, path: str, layer: _Layer
    ) -> rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey:
        try:
            key = serialization.load_pem_private_key(self._in(layer, path).read_bytes(), None)
        except (OSError, ValueError, TypeError) as error:
            raise ValueError(f"{path}: not a PEM private key: {error}") from error
        if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
            raise ValueError(f"{path}: a {type(key).__name__}, not an RSA or EC key")
        return key

    def _certificate(self, path: str, layer: _Layer) -> x509.Certificate:
        try:
            return x509.load_pem_x509_certificate(self._in(layer, path).read_bytes())
        except (OSError, ValueError, binascii.Error) as error:
            raise ValueError(f"{path}: not a PEM certificate: {error}") from error
