from ninferkit.cli import main

raise SystemExit(main())
