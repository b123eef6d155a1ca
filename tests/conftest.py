"""Repository-wide pytest configuration."""

# The broker fixture shipped for users is a pytest11 plugin of the installed package; naming
# it here too (it loads once) keeps the suite working from a plain checkout. pytester lets
# tests run the plugin in an inner pytest session.
pytest_plugins = ["streams.testing.kafka_fixture", "pytester"]
