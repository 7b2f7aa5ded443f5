import typer


def tokenize(model: str = typer.Argument(...), text: str = typer.Argument(...)) -> None:
    """Tokenize text (work in progress)."""
    raise NotImplementedError
