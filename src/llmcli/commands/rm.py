import typer


def rm(model: str = typer.Argument(...)) -> None:
    """Remove a model (work in progress)."""
    raise NotImplementedError
