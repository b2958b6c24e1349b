"""Spark bridge tests (real local Spark, real mosquitto)."""
