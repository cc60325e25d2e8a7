from caraml.cli import main

raise SystemExit(main())
