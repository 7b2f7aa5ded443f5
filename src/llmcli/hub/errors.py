"""What can go wrong with the hub, as LlmcliErrors whose message is one line naming the fix."""

from __future__ import annotations

from llmcli.errors import LlmcliError, ModelNotFound, RuntimeFailure, UsageError


class RepoNotFound(ModelNotFound):
    pass


class GatedRepo(LlmcliError):
    """Gated or private: the repo exists but this token (or no token) may not read it."""


class RevisionNotFound(UsageError):
    pass


class QuantNotFound(UsageError):
    pass


class NothingToPull(UsageError):
    """The repo holds neither GGUF files nor a safetensors checkpoint."""


class OfflineMissing(LlmcliError):
    """Offline (or the hub unreachable), and the files are not in the local cache."""


class HubUnavailable(RuntimeFailure):
    """No answer, or a 5xx: the hub is down or unreachable, which the local cache may make up for."""


class NotEnoughSpace(LlmcliError):
    pass


class IntegrityError(LlmcliError):
    """A downloaded file's bytes do not match the hub's checksum."""


class BadHubAnswer(RuntimeFailure):
    """The server sent a name, sha or checksum that is not in the hub's format, or one that would lead
    out of the cache: nothing from that answer is used."""
