"""The client side of a Kafka cluster for tidemark's tools (cli/ and spark/): the admin calls
(admin.py), requests the AdminClient cannot send over a blocking connection (connection.py),
and the lag probe (lag_probe.py). Works against tidemark or any Kafka cluster."""
