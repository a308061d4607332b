def main() -> None:
    print("headrace")
