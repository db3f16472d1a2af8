"""What every layer shares and no layer owns: environment settings, progress reporting, the LLM client."""
