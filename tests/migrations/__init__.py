"""Migration tests. What riverboat's own line holds is read from its bundled files, so
adding a version to it changes no test that only counts or names the line's versions."""

from riverboat.migrations._files import load_bundles

# riverboat's line: the same versions on both databases (tests/migrations/test_cli_flags).
RIVERBOAT_LINE = {
    version: bundle.name for version, bundle in load_bundles("postgres", "riverboat").items()
}
RIVERBOAT_LATEST = max(RIVERBOAT_LINE)


def riverboat_step(version: int) -> str:
    """How the CLI names riverboat's ``version`` in the stack: ``riverboat 005 flow claim
    records``."""
    return f"riverboat {version:03d} {RIVERBOAT_LINE[version]}"
