"""Repository-wide pytest configuration."""

# The broker fixture shipped for users (the integration and client suites use it);
# pytester lets tests run the plugin in an inner pytest session.
pytest_plugins = ["streams.testing.kafka_fixture", "pytester"]
