"""Publishing: the kernel every publish goes through (leaf fan-out, requirements, the one
`__manifest` swap, recovery), the claim protocol, direct writes and transactions."""
