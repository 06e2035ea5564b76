"""Opening a sidecar: its home and the locks on it, the hot index as the settings
name it, the demo."""
