"""What tests share: builders of sessions, tokens and files, never tests."""
