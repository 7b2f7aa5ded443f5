def list_models() -> None:
    """List models (work in progress)."""
    raise NotImplementedError
