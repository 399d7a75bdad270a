"""What every layer may use: ``errors.py`` (ConfigError), ``progress.py`` (a long step's progress),
``resources.py`` (the configs and studies the package ships, its checkout, its version),
``groups.py`` (frozen settings groups from a constructor's flat keys), ``threads.py`` (how many CPU
threads this process computes with)."""
