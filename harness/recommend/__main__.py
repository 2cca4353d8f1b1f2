from harness.recommend import main

main()
