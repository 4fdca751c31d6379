"""Spark for lakelog: the sessions it builds and the local Spark Connect server it manages."""
