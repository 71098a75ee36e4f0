from sglforge.cli import main

main()
