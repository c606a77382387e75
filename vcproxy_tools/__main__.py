from vcproxy_tools.cli import main

raise SystemExit(main())
