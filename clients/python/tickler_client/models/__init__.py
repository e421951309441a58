""" Contains all the data models used in inputs/outputs """

from .audit_page import AuditPage
from .audit_view import AuditView
from .backfill_answer import BackfillAnswer
from .backfill_schedule import BackfillSchedule
from .batch_answer import BatchAnswer
from .batch_item import BatchItem
from .bulk_action_type_0 import BulkActionType0
from .bulk_action_type_0_type import BulkActionType0Type
from .bulk_action_type_1 import BulkActionType1
from .bulk_action_type_1_type import BulkActionType1Type
from .bulk_action_type_2 import BulkActionType2
from .bulk_action_type_2_type import BulkActionType2Type
from .bulk_action_type_3 import BulkActionType3
from .bulk_action_type_3_type import BulkActionType3Type
from .bulk_action_type_4 import BulkActionType4
from .bulk_action_type_4_type import BulkActionType4Type
from .bulk_action_type_5 import BulkActionType5
from .bulk_action_type_5_type import BulkActionType5Type
from .bulk_action_type_6 import BulkActionType6
from .bulk_action_type_6_type import BulkActionType6Type
from .bulk_filter import BulkFilter
from .bulk_list import BulkList
from .bulk_preview import BulkPreview
from .bulk_request import BulkRequest
from .bulk_view import BulkView
from .burst_ahead import BurstAhead
from .cancel_answer import CancelAnswer
from .clock_advance import ClockAdvance
from .clock_view import ClockView
from .consumed_view import ConsumedView
from .create_batch import CreateBatch
from .create_job import CreateJob
from .create_job_headers_type_0 import CreateJobHeadersType0
from .create_schedule import CreateSchedule
from .create_schedule_headers_type_0 import CreateScheduleHeadersType0
from .drift import Drift
from .error_body import ErrorBody
from .error_detail import ErrorDetail
from .filter_body import FilterBody
from .fire_outcome import FireOutcome
from .fire_view import FireView
from .forecast import Forecast
from .forecast_bucket import ForecastBucket
from .forecast_topic import ForecastTopic
from .health import Health
from .history import History
from .history_event import HistoryEvent
from .ingress_lag import IngressLag
from .job_page import JobPage
from .job_view import JobView
from .job_view_headers import JobViewHeaders
from .kafka_position import KafkaPosition
from .lateness_minute import LatenessMinute
from .live import Live
from .misfire import Misfire
from .occurrence_view import OccurrenceView
from .outcome import Outcome
from .overdue_view import OverdueView
from .patch_job import PatchJob
from .patch_job_headers_type_0 import PatchJobHeadersType0
from .patch_schedule import PatchSchedule
from .patch_schedule_headers_type_0 import PatchScheduleHeadersType0
from .patch_topic import PatchTopic
from .patch_topic_payload_schema_type_0 import PatchTopicPayloadSchemaType0
from .preview import Preview
from .preview_schedule import PreviewSchedule
from .quota_view import QuotaView
from .ready import Ready
from .ready_checks import ReadyChecks
from .redrive_job import RedriveJob
from .release_job import ReleaseJob
from .report_answer import ReportAnswer
from .report_body import ReportBody
from .schedule_audit import ScheduleAudit
from .schedule_changed import ScheduleChanged
from .schedule_deleted import ScheduleDeleted
from .schedule_page import SchedulePage
from .schedule_stats import ScheduleStats
from .schedule_status import ScheduleStatus
from .schedule_view import ScheduleView
from .schedule_view_headers import ScheduleViewHeaders
from .stats import Stats
from .status import Status
from .topic_count import TopicCount
from .topic_list import TopicList
from .topic_view import TopicView
from .topic_view_payload_schema_type_0 import TopicViewPayloadSchemaType0
from .trigger_schedule import TriggerSchedule
from .tzdata_view import TzdataView

__all__ = (
    "AuditPage",
    "AuditView",
    "BackfillAnswer",
    "BackfillSchedule",
    "BatchAnswer",
    "BatchItem",
    "BulkActionType0",
    "BulkActionType0Type",
    "BulkActionType1",
    "BulkActionType1Type",
    "BulkActionType2",
    "BulkActionType2Type",
    "BulkActionType3",
    "BulkActionType3Type",
    "BulkActionType4",
    "BulkActionType4Type",
    "BulkActionType5",
    "BulkActionType5Type",
    "BulkActionType6",
    "BulkActionType6Type",
    "BulkFilter",
    "BulkList",
    "BulkPreview",
    "BulkRequest",
    "BulkView",
    "BurstAhead",
    "CancelAnswer",
    "ClockAdvance",
    "ClockView",
    "ConsumedView",
    "CreateBatch",
    "CreateJob",
    "CreateJobHeadersType0",
    "CreateSchedule",
    "CreateScheduleHeadersType0",
    "Drift",
    "ErrorBody",
    "ErrorDetail",
    "FilterBody",
    "FireOutcome",
    "FireView",
    "Forecast",
    "ForecastBucket",
    "ForecastTopic",
    "Health",
    "History",
    "HistoryEvent",
    "IngressLag",
    "JobPage",
    "JobView",
    "JobViewHeaders",
    "KafkaPosition",
    "LatenessMinute",
    "Live",
    "Misfire",
    "OccurrenceView",
    "Outcome",
    "OverdueView",
    "PatchJob",
    "PatchJobHeadersType0",
    "PatchSchedule",
    "PatchScheduleHeadersType0",
    "PatchTopic",
    "PatchTopicPayloadSchemaType0",
    "Preview",
    "PreviewSchedule",
    "QuotaView",
    "Ready",
    "ReadyChecks",
    "RedriveJob",
    "ReleaseJob",
    "ReportAnswer",
    "ReportBody",
    "ScheduleAudit",
    "ScheduleChanged",
    "ScheduleDeleted",
    "SchedulePage",
    "ScheduleStats",
    "ScheduleStatus",
    "ScheduleView",
    "ScheduleViewHeaders",
    "Stats",
    "Status",
    "TopicCount",
    "TopicList",
    "TopicView",
    "TopicViewPayloadSchemaType0",
    "TriggerSchedule",
    "TzdataView",
)
