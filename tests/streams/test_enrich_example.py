"""examples/enrich.py on the embedded cluster: the stream-table, stream-global-table and
stream-stream join outputs match the example's plain-Python reference of Kafka's rules; the
reference itself is checked on small hand-derived cases."""

from examples import enrich


def test_enrich_example_matches_its_reference(tmp_path, capsys):
    assert enrich.main(["--data-dir", str(tmp_path / "enrich"), "--clicks", "300", "--users", "8",
                        "--orders", "60"]) == 0
    out = capsys.readouterr().out
    assert "clicks enriched from the profiles table (stream-table left join): 300 records; match the reference: yes" in out
    assert "clicks with page titles from a global table (stream-global-table join)" in out
    assert "orders paid within 10 minutes (stream-stream join)" in out
    assert out.count("match the reference: yes") == 3


def test_reference_of_the_stream_table_left_join():
    # the table's value at each click's time: before the profile, after an update, after a delete
    profiles = [("u", "Ann|free", 5), ("u", "Ann|pro", 10), ("u", None, 20)]
    clicks = [("u", "/a", 1), ("u", "/b", 7), ("u", "/c", 12), ("u", "/d", 25), ("v", "/e", 26)]
    assert enrich.expected_enriched(profiles, clicks) == {
        "u": ["/a by an unknown user", "/b by Ann (free)", "/c by Ann (pro)", "/d by an unknown user"],
        "v": ["/e by an unknown user"]}


def test_reference_of_the_payment_window():
    # 10 minutes before or after the order, bounds included; each matching payment joins
    minute = 60_000
    orders = [("o1", "c|5.00", 100 * minute), ("o2", "c|7.00", 100 * minute)]
    payments = [("o1", "card", 110 * minute), ("o1", "paypal", 90 * minute), ("o1", "late", 110 * minute + 1),
                ("o2", "card", 89 * minute)]
    assert enrich.expected_paid(orders, payments) == {"o1": ["c paid 5.00 by card", "c paid 5.00 by paypal"]}
