"""Every Tinker feature `kitchen serve` refuses, with the reason and what to use instead.

One place, so the conformance table (docs/reference/tinker-sdk-conformance.md) and the server
agree on what is refused and why. Each refusal is a `NotServed` (HTTP 400) raised where the
request is made, or, for an option of a client, when the client is created: never ignored.
"""

from __future__ import annotations

from kitchen.apps.serve.errors import NotServed

STABLE_REINFORCE = (
    "loss_fn 'stable_reinforce' is not served: Tinker has not published its formula (it reads "
    "stability data that only Tinker's own sampler records), so kitchen cannot compute it; use "
    "importance_sampling, ppo, cispo, dro or gspo"
)
STABILITY_INFO = (
    "record_stability_info is not served: it records the sampling-time data of Tinker's "
    "stable_reinforce loss, whose formula Tinker has not published; sample without it and train "
    "with importance_sampling, ppo, cispo, dro or gspo"
)
DIMUON = (
    "the Dimuon optimizer is not served: Tinker documents its hyper-parameters (beta1, damping, "
    "rank-corrected learning rate, grad clipping) but has not published the algorithm, so kitchen "
    "cannot run it; create the training client with the default AdamW optimizer (AdamParams)"
)
DMEL_AUDIO = (
    "DmelChunk (audio) inputs are not served: kitchen serves no audio model; send token "
    "(EncodedTextChunk) or image (ImageChunk) chunks"
)
INFLIGHT_SAMPLER = (
    "save_weights_and_get_sampling_client(kind='inflight') is not served: an inflight sampler "
    "follows a training model's weights as new versions propagate across Tinker's sampler "
    "replicas, which a single kitchen server does not have; use kind='snapshot' (the default) "
    "and make a new sampling client after each optimizer step"
)
AGE_ENCRYPTION = (
    "save_weights_external(age_encryption_recipients=...) is not served without the pyrage package "
    "(pip install 'kitchen[serve]'); export without recipients and encrypt the downloaded files "
    "with `age -r RECIPIENT`"
)
KEY_DELETION = (
    "deleting an API key through the API is not served: a kitchen server's keys are the lines of "
    "its --api-keys file (any tml- key on a loopback server without one); remove the line there "
    "and restart the server"
)
CUSTOM_LOSS_UPLOAD = (
    "server-side custom losses are not served: this server asks the SDK to run custom losses "
    "client-side (custom_loss_server_side=false), which forward_backward_custom does by itself"
)


def refuse(message: str) -> NotServed:
    """The refusal to raise for `message` (one of this module's constants)."""
    return NotServed(message)
