"""Code the tests share, kept out of the installed package."""
