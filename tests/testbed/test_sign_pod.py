"""KMM's sign Pod as the test bed's kubelet runs it: the Dockerfile KMM writes read strictly,
and kaniko's build with sign-file over the image catalogue (plain data: Pods as KMM makes
them, Secrets as the API returns them, a catalogue in a folder; no API server, no processes).
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest

from gpuctl.common.module_signature import SignatureFacts, read_signature
from testbed.fakehost.signing import SigningKey, signing_key
from testbed.harness.kubelet import pod_status
from testbed.harness.kubelet.catalogue import MODULES_DIR, ImageCatalogue
from testbed.harness.kubelet.sign_dockerfile import (
    Copy,
    DockerfileError,
    SignLoop,
    Stage,
    parse,
)
from testbed.harness.kubelet.sign_pod import SignPod, VolumeNotReadyError

UNSIGNED = "registry.example.com/xe:1"
SIGNED = "registry.example.com/xe:1-signed"
SIGN_IMAGE = "registry.example.com/kmm/signimage:test"
KERNEL = "6.8.0-60-generic"
XE = f"/opt/lib/modules/{KERNEL}/updates/xe.ko"


def kmm_dockerfile(unsigned: str, files: list[str], dir_name: str = "/opt") -> str:
    """The Dockerfile KMM v2.6.0 renders for a sign (templates/Dockerfile.gotmpl), as data."""
    runs = "".join(
        f"\nRUN for file in /opt{file}; do \\\n"
        '      [ -e "${file}" ] && /usr/local/bin/sign-file sha256 '
        '/run/secrets/key/key.pem /run/secrets/cert/cert.pem "${file}"; \\\n'
        "    done"
        for file in files
    )
    return (
        f"FROM {unsigned} as source\n\n"
        f"FROM {SIGN_IMAGE} AS signimage\n"
        f"COPY --from=source {dir_name} /opt{dir_name}{runs}\n\n"
        "FROM source\n"
        f"COPY --from=signimage /opt{dir_name} {dir_name}\n"
    )


def kmm_sign_pod(
    dockerfile: str, args: tuple[str, ...] = ("--destination", SIGNED)
) -> dict[str, Any]:
    """A sign Pod as KMM makes it (internal/buildsign/resource: signSpec, volumes.go)."""
    return {
        "metadata": {
            "name": "xe-sign-abcde",
            "labels": {"kmm.node.kubernetes.io/resource-type": "SignImage"},
            "annotations": {"dockerfile": dockerfile},
        },
        "spec": {
            "containers": [
                {
                    "name": "kaniko",
                    "image": "gcr.io/kaniko-project/executor:test",
                    "args": list(args),
                    "volumeMounts": [
                        {"name": "secret-cert", "readOnly": True, "mountPath": "/run/secrets/cert"},
                        {"name": "secret-key", "readOnly": True, "mountPath": "/run/secrets/key"},
                        {"name": "dockerfile", "readOnly": True, "mountPath": "/workspace"},
                        {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io"},
                    ],
                }
            ],
            "restartPolicy": "Never",
            "volumes": [
                {
                    "name": "secret-cert",
                    "secret": {
                        "secretName": "cert",
                        "items": [{"key": "cert", "path": "cert.pem"}],
                    },
                },
                {
                    "name": "secret-key",
                    "secret": {"secretName": "key", "items": [{"key": "key", "path": "key.pem"}]},
                },
                {
                    "name": "dockerfile",
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "Dockerfile",
                                "fieldRef": {"fieldPath": "metadata.annotations['dockerfile']"},
                            }
                        ]
                    },
                },
                {"name": "kube-api-access", "projected": {"sources": []}},
            ],
        },
    }


def fleet() -> SigningKey:
    return signing_key("ACME GPU fleet module signing", 0x1D5E7A)


def other() -> SigningKey:
    return signing_key("ACME lab module signing", 0x1AB)


def secrets(key: bytes, cert: bytes) -> dict[str, dict[str, Any]]:
    """The Secrets `key` and `cert` as the API returns them (data base64)."""
    return {
        "key": {"data": {"key": base64.b64encode(key).decode()}},
        "cert": {"data": {"cert": base64.b64encode(cert).decode()}},
    }


def catalogue(tmp_path: Path) -> ImageCatalogue:
    images = ImageCatalogue(tmp_path / "registry")
    images.add_xe_image(
        UNSIGNED, [KERNEL], version="v1", srcversion="S1", companions=["xe_compat"],
        firmware=["bmg_guc_70.bin"],
    )  # fmt: skip
    return images


def run(
    tmp_path: Path,
    images: ImageCatalogue,
    pod: dict[str, Any],
    stored: dict[str, dict[str, Any]] | None = None,
) -> tuple[int, str]:
    """Mounts the Pod's volumes and builds: (exit code, output)."""
    stored = secrets(fleet().key_pem, fleet().certificate_pem) if stored is None else stored
    sign = SignPod(pod, tmp_path / "pod", images, SIGN_IMAGE)
    sign.mount(stored.get)
    code = sign.build()
    return code, "\n".join(sign.output)


def module(images: ImageCatalogue, image: str, name: str = "xe") -> bytes:
    return (images.folder(image) / MODULES_DIR / KERNEL / "updates" / f"{name}.ko").read_bytes()


# --- the Dockerfile -----------------------------------------------------------------------


def test_kmms_dockerfile_reads_as_its_three_stages() -> None:
    loop = SignLoop(
        5,
        (f"/opt{XE}",),
        "/usr/local/bin/sign-file",
        "sha256",
        "/run/secrets/key/key.pem",
        "/run/secrets/cert/cert.pem",
    )
    assert parse(kmm_dockerfile(UNSIGNED, [XE])) == [
        Stage(1, UNSIGNED, "source"),
        Stage(3, SIGN_IMAGE, "signimage", (Copy(4, "source", "/opt", "/opt/opt"), loop)),
        Stage(9, "source", None, (Copy(10, "signimage", "/opt/opt", "/opt"),)),
    ]


def test_each_file_to_sign_is_a_loop_of_its_own() -> None:
    stages = parse(kmm_dockerfile(UNSIGNED, [XE, "/opt/lib/modules/*/updates/xe_*.ko"]))
    loops = [step for step in stages[1].steps if isinstance(step, SignLoop)]
    assert [(loop.line, loop.words) for loop in loops] == [
        (5, (f"/opt{XE}",)),
        (8, ("/opt/opt/lib/modules/*/updates/xe_*.ko",)),
    ]


SIGN = '[ -e "${file}" ] && /usr/local/bin/sign-file sha256 /k /c "${file}"'


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        ("FROM a as source\nADD x /y\n", 2, "ADD is not an instruction read here"),
        ("FROM a\nRUN echo signed\n", 2, "RUN is not KMM's sign-file loop"),
        (f"FROM a\nRUN for file in /x; do {SIGN.split('&& ')[1]}; done\n", 2, "sign-file loop"),
        (f"FROM a\nRUN for file in $(ls /opt); do {SIGN}; done\n", 2, "not an absolute path"),
        (f"FROM a\nRUN for file in opt/x.ko; do {SIGN}; done\n", 2, "not an absolute path"),
        (f'FROM a\nRUN ["sh", "-c", "for file in /x; do {SIGN}; done"]\n', 2, "sign-file loop"),
        ("FROM a\nCOPY /a /b\n", 2, "COPY takes --from=<stage>"),
        ("FROM a\nCOPY --from=s --chown=1 /a /b\n", 2, "COPY takes --from=<stage>"),
        ("FROM a\nCOPY --from=s a /b\n", 2, "COPY paths must be absolute"),
        ("FROM a\nCOPY --from=s /a /b c\n", 2, "COPY takes --from=<stage>"),
        ("FROM --platform=linux/amd64 a\n", 1, "FROM takes an image"),
        ("FROM a AS\n", 1, "FROM takes an image"),
        ("FROM a as b c\n", 1, "FROM takes an image"),
        ("COPY --from=s /a /b\nFROM a\n", 1, "COPY before any FROM"),
        (f"FROM a\nRUN for file in /x; do \\\n  {SIGN}; \\\n", 2, "never finished"),
        ("\n# nothing\n", 0, "no FROM"),
        ("FROM a AS s\nFROM b AS s\n", 2, "a stage name used twice"),
    ],
)
def test_what_the_reader_does_not_understand_is_an_error_naming_the_line(
    text: str, line: int, why: str
) -> None:
    with pytest.raises(
        DockerfileError, match=f"^Dockerfile line {line}: .*{re.escape(why)}"
    ) as raised:
        parse(text)
    assert raised.value.line == line


def test_comments_blank_lines_and_the_case_of_instructions_are_docker_s() -> None:
    text = (
        "# signed by KMM\nfrom a AS s\n\ncopy --from=s /a /b\n"
        'run for f in /x /y*; do \\\n[ -e "${f}" ] && /t sha512 /k /c "${f}"; done\n'
    )
    assert parse(text) == [
        Stage(
            2,
            "a",
            "s",
            (Copy(4, "s", "/a", "/b"), SignLoop(5, ("/x", "/y*"), "/t", "sha512", "/k", "/c")),
        ),
    ]


# --- the build ----------------------------------------------------------------------------


def test_the_sign_pod_pushes_the_image_with_its_module_signed(tmp_path: Path) -> None:
    images = catalogue(tmp_path)
    code, output = run(tmp_path, images, kmm_sign_pod(kmm_dockerfile(UNSIGNED, [XE])))
    assert code == 0, output
    assert output.endswith(f"INFO Pushing image to {SIGNED}")
    key = fleet()
    assert read_signature(module(images, SIGNED)) == SignatureFacts(
        key.common_name, key.key_id, "sha256"
    )
    assert module(images, SIGNED).startswith(module(images, UNSIGNED))
    assert read_signature(module(images, UNSIGNED)) is None  # the unsigned image is untouched
    assert read_signature(module(images, SIGNED, "xe_compat")) is None  # not in filesToSign
    firmware = images.folder(SIGNED) / "firmware/xe/bmg_guc_70.bin"
    assert firmware.read_bytes() == b"\0" * 64  # the rest of the image comes along


def test_a_glob_signs_every_module_it_matches(tmp_path: Path) -> None:
    images = catalogue(tmp_path)
    dockerfile = kmm_dockerfile(UNSIGNED, ["/opt/lib/modules/*/updates/*.ko"])
    assert run(tmp_path, images, kmm_sign_pod(dockerfile))[0] == 0
    assert read_signature(module(images, SIGNED)) is not None
    assert read_signature(module(images, SIGNED, "xe_compat")) is not None


def test_no_push_builds_and_stores_nothing(tmp_path: Path) -> None:
    images = catalogue(tmp_path)
    pod = kmm_sign_pod(kmm_dockerfile(UNSIGNED, [XE]), args=("--no-push", "--insecure-pull"))
    assert run(tmp_path, images, pod)[0] == 0
    assert not images.has(SIGNED)


@pytest.mark.parametrize(
    ("stored", "words"),
    [
        (
            secrets(other().key_pem, fleet().certificate_pem),
            "sign-file: CMS_add1_signer: key values mismatch",
        ),
        (
            secrets(b"not a key", fleet().certificate_pem),
            "sign-file: /run/secrets/key/key.pem: not a PEM private key",
        ),
        (
            secrets(
                fleet().key_pem, b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
            ),
            "sign-file: /run/secrets/cert/cert.pem: not a PEM certificate",
        ),
    ],
    ids=["key-not-the-certificates", "key-not-pem", "certificate-not-pem"],
)
def test_a_bad_key_or_certificate_fails_the_build(
    tmp_path: Path, stored: dict[str, dict[str, Any]], words: str
) -> None:
    images = catalogue(tmp_path)
    code, output = run(tmp_path, images, kmm_sign_pod(kmm_dockerfile(UNSIGNED, [XE])), stored)
    assert code == 1
    assert words in output
    assert output.endswith("failed to execute command: waiting for process to exit: exit status 1")
    assert not images.has(SIGNED)


PUSH = ("--destination", SIGNED)
NO_SIGN_FILE = (
    f'FROM {UNSIGNED} AS s\nRUN for f in {XE}; do [ -e "${{f}}" ] && '
    '/usr/local/bin/sign-file sha256 /run/secrets/key/key.pem /k "${f}"; done\n'
)
USER_LINE = kmm_dockerfile(UNSIGNED, [XE]).replace("FROM source\n", "FROM source\nUSER root\n")
MISSING = "registry.example.com/xe:none"


@pytest.mark.parametrize(
    ("dockerfile", "args", "words"),
    [
        (
            kmm_dockerfile(MISSING, [XE]),
            PUSH,
            f'error building image: retrieving image "{MISSING}": MANIFEST_UNKNOWN',
        ),
        # [ -e "${file}" ] is false for the loop's last file: its status is the loop's.
        (kmm_dockerfile(UNSIGNED, ["/opt/lib/modules/9.9/xe.ko"]), PUSH, "exit status 1"),
        (USER_LINE, PUSH, "parsing dockerfile: Dockerfile line 10: USER is not an instruction"),
        (NO_SIGN_FILE, PUSH, "/bin/sh: /usr/local/bin/sign-file: not found"),
        (kmm_dockerfile(UNSIGNED, [XE]), (*PUSH, "--cache=true"), "unknown flag: --cache=true"),
        (kmm_dockerfile(UNSIGNED, [XE]), (), "you must provide --destination, or use --no-push"),
    ],
    ids=[
        "unsigned-image-missing",
        "file-missing",
        "unknown-instruction",
        "no-sign-file",
        "unknown-flag",
        "no-destination",
    ],
)
def test_what_kaniko_cannot_do_fails_the_build_saying_why(
    tmp_path: Path, dockerfile: str, args: tuple[str, ...], words: str
) -> None:
    images = catalogue(tmp_path)
    code, output = run(tmp_path, images, kmm_sign_pod(dockerfile, args))
    assert code == 1
    assert words in output
    assert not images.has(SIGNED)


@pytest.mark.parametrize(
    ("stored", "words"),
    [
        ({}, 'MountVolume.SetUp failed for volume "secret-cert" : secret "cert" not found'),
        ({"cert": {"data": {}}, "key": {"data": {}}},
         'volume "secret-cert" : references non-existent secret key: cert'),
    ],
)  # fmt: skip
def test_a_missing_secret_keeps_the_container_from_being_created(
    tmp_path: Path, stored: dict[str, dict[str, Any]], words: str
) -> None:
    sign = SignPod(
        kmm_sign_pod(kmm_dockerfile(UNSIGNED, [XE])), tmp_path, catalogue(tmp_path), SIGN_IMAGE
    )
    with pytest.raises(VolumeNotReadyError, match=words):
        sign.mount(stored.get)


def test_the_termination_message_is_the_logs_only_when_the_pod_asks() -> None:
    container: dict[str, Any] = {"name": "kaniko"}
    assert pod_status.termination_message(container, 1, "error building image\n") == ""
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    assert pod_status.termination_message(container, 1, "a\nerror building image\n") == (
        "a\nerror building image"
    )
    assert pod_status.termination_message(container, 0, "done\n") == ""
