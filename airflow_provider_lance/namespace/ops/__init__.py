"""Table operations (delete, merge, optimize, verify) as strategies over the kernel."""
