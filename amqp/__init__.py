"""AMQP 0-9-1 protocol core (sans-IO) and the asyncio server around it."""
