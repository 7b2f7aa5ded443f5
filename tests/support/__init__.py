"""Code the tests (and the checkout scripts and benchmarks) share, kept out of the installed package."""
