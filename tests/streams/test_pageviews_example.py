"""examples/pageviews.py on the embedded cluster: the final window counts (one per window, after
suppress, across a restart half-way with the local state wiped, so the window store, the
suppression buffer and the tables restore from their changelogs), the dropped late records
(app.metrics()) and the region counts (app.store) match the example's plain-Python reference of
Kafka's rules."""

from examples import pageviews


def test_pageviews_example_matches_its_reference(tmp_path, capsys):
    assert pageviews.main(["--data-dir", str(tmp_path / "pv"), "--views", "600", "--users", "8",
                           "--moves", "20"]) == 0
    out = capsys.readouterr().out
    assert "closed the app and wiped its state" in out
    assert "final window counts match the reference: yes; one result per window: yes; dropped records match: yes" in out


def test_reference_of_hopping_windows_with_grace():
    # a view at 65 s is in the windows starting at 30 s and 60 s; a view at 130 s closes
    # [0,60) and [30,90) only once stream time reaches end + 10 s grace
    views = [("u", "/", 65_000), ("u", "/", 170_000), ("u", "/", 70_000)]
    closed, dropped = pageviews.expected_windows(views)
    # 170 s: [30,90) closed at 100 s, [60,120) at 130 s: the view at 70 s is late for both
    assert closed == {"u@30000": 1, "u@60000": 1} and dropped == 2
