/** Version of the package and of the SQL it installs (bumped together). */
export const VERSION = '0.2.0';
