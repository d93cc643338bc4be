"""ALFWorld-style household tasks (RAGEN's Alfworld env) on generated games or real ALFWorld data."""
