"""A test that fails on a leak, for docs/pytest.md ("What a failure looks like"); run only by name:
``python -m pytest docs/examples/pytest_failure_example.py`` (it is not a test of leakscope)."""


def test_fixture_leaky(leakscope):  # type: ignore[no-untyped-def]
    leakscope.check("fixtures.verl_bug:Engine", mode="train")
