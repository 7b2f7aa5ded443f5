import typer


def chat(model: str = typer.Argument(None)) -> None:
    """Chat with a model (work in progress)."""
    raise NotImplementedError
