"""The format in memory: the `__manifest` table and its rows, schemas, partition specs,
expressions, hashing and names. Reads through io/, never writes a commit itself."""
