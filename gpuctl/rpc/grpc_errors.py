"""Say in plain words why a call to the coordinator failed.

gRPC folds very different failures into one status code: a CA that does not verify the
server, a refused connection and a DNS miss all arrive as UNAVAILABLE with the reason buried
in `details`. People reading the agent's logs or the CLI's error need the reason first, so
`describe_rpc_failure` turns (code, details) into a short phrase plus the server's words.
Pure: tests feed it the details strings real failures produce.
"""

from __future__ import annotations

import grpc

# Substrings of grpc-core's `details`, checked in this order, and what they mean.
_UNAVAILABLE_CAUSES: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("WRONG_VERSION_NUMBER",),
        "TLS handshake failed: the server does not speak TLS (a plaintext server needs --insecure)",
    ),
    (
        (
            "CERTIFICATE_VERIFY_FAILED",
            "certificate verify failed",
            "verification check failed",
            "Hostname Verification",
            "Peer name",
        ),
        "TLS verification failed (check --ca-file / --tls-server-name)",
    ),
    (
        ("handshake failed", "TSI_PROTOCOL_FAILURE", "SSL_ERROR"),
        "TLS handshake failed",
    ),
    (
        ("Socket closed", "Trying to connect an http1.x server"),
        "the connection closed during setup (--insecure against a TLS server?)",
    ),
    (
        ("errors resolving", "Domain name not found", "DNS resolution failed"),
        "coordinator unreachable: its name does not resolve",
    ),
    (
        (
            "Connection refused",
            "No route to host",
            "Network is unreachable",
            "Connection reset",
            "Timeout occurred",
            "Deadline Exceeded",
            "failed to connect to all addresses",
        ),
        "coordinator unreachable",
    ),
)


def _contains_any(text: str, markers: tuple[str, ...]) -> bool:
    lowered = text.lower()
    return any(marker.lower() in lowered for marker in markers)


def _unavailable(details: str) -> str:
    for markers, phrase in _UNAVAILABLE_CAUSES:
        if _contains_any(details, markers):
            return phrase
    return "coordinator unavailable"


def _permission_denied(details: str) -> str:
    if "mismatch" in details.lower() or "node" in details.lower():
        return 'PERMISSION_DENIED "node mismatch" (the token is bound to another node)'
    return "PERMISSION_DENIED"


_PHRASES = {
    grpc.StatusCode.UNAUTHENTICATED: "UNAUTHENTICATED (the coordinator rejected the token)",
    grpc.StatusCode.DEADLINE_EXCEEDED: "the coordinator did not answer in time",
    grpc.StatusCode.UNIMPLEMENTED: "the server does not offer this API (not a gpuctl coordinator?)",
}


# What gRPC Python's asyncio client reports when a write fails because the server has just
# ended the stream: it overwrites the status the server sent (grpc/grpc#36066), so a
# refusal (a rejected token) can arrive as this instead of its own code and words.
LOST_STATUS_DETAILS = "Internal error from Core"
LOST_STATUS_PHRASE = (
    "the coordinator ended the stream as a message was being sent, and gRPC Python lost its "
    "reason (grpc/grpc#36066; the coordinator logs it as 'agent stream refused')"
)


def describe_rpc_failure(code: grpc.StatusCode | None, details: str) -> str:
    """`<what went wrong>: <the server's or grpc's own words>`."""
    words = details.strip() or "(no details)"
    if code is grpc.StatusCode.INTERNAL and details.strip() == LOST_STATUS_DETAILS:
        phrase = LOST_STATUS_PHRASE
    elif code is grpc.StatusCode.UNAVAILABLE:
        phrase = _unavailable(details)
    elif code is grpc.StatusCode.PERMISSION_DENIED:
        phrase = _permission_denied(details)
    elif code in _PHRASES:
        phrase = _PHRASES[code]
    else:
        phrase = code.name if code is not None else "UNKNOWN"
    return f"{phrase}: {words}"
