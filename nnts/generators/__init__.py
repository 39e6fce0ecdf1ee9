"""Models made for testing: random graphs and operations, and one-operation builders."""
