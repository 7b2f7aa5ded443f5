import typer


def show(model: str = typer.Argument(...)) -> None:
    """Show a model's facts (work in progress)."""
    raise NotImplementedError
