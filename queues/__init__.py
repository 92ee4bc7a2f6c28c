"""Queues, consumers and delivery."""
