"""What the console's modules share."""


def hours(seconds: int) -> str:
    return f"{seconds / 3600:,.1f}"
