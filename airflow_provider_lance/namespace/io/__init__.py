"""Storage: the only code that touches Lance datasets and object stores."""
