from flowrl.cli import main
import sys
sys.exit(main())
