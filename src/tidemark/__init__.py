"""tidemark: Kafka's inbuilt consumer offset management, as a broker real Kafka clients talk to."""

__version__ = "0.1.0"
