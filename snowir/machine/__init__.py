"""The Snowflake machine model: encoding, program image, state, engines, cycle model."""
