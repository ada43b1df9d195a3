"""One module per Kafka API (or small family of APIs); each exposes `async def handle(ctx, request)`.

A handler returns the response as a dict of Kafka's field names (built into the version's kio
entity by the dispatcher), an entity, or None when the API sends no response (Produce acks=0).
"""
