"""Listeners and authentication: Kafka's listeners, TLS (PEM material) and SASL (PLAIN, SCRAM).

listeners.py resolves `listeners`, `advertised.listeners` and `listener.security.protocol.map`
into the endpoints a broker binds and advertises; tls.py builds a listener's SSLContext;
sasl.py is the per-connection authenticator; scram_store.py keeps SCRAM credentials (a data
directory file, or ZooKeeper's /config/users when clustered) behind one interface.
"""
