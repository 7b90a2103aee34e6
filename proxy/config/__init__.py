"""Settings: flags, environment variables and the YAML file, resolved once at start-up."""
